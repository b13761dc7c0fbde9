"""A run as an agent reads it back (history, best, show_round): any run under the runs directory, an
agent's or `harness run`'s, its rounds in the table and words the loop's feedback uses."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..loop.feedback import Past, Thresholds, history_table, speedup_line
from ..loop.prompts import Prompts
from ..runs.history import load, load_rounds
from ..runs.records import Best, Round, RoundSummary, Run
from ..runs.store import RunStore
from .inputs import AgentError, Roots
from .sessions import told


@dataclass
class History:
    text: str
    run: str
    problem: str
    proposer: str
    status: str
    stop_reason: str
    outcome: str
    accept: float
    target: float
    best: Optional[Best]
    rounds: list[RoundSummary]


@dataclass
class BestKernel:
    text: str
    run: str
    round: int
    speedup: float
    interval: Optional[list[float]]
    path: str
    source: str


@dataclass
class RoundRecord:
    text: str
    run: str
    round: Round


class Records:
    def __init__(self, runs_dir: Path, roots: Roots, prompts: Prompts):
        self.runs_dir, self.roots, self.prompts = Path(runs_dir), roots, prompts

    def _load(self, run: str) -> tuple[RunStore, Run, list[Round]]:
        if Path(run).is_dir():  # a directory named outright, not an id under the runs directory
            self.roots.inside(run, "Run directory")
        store, record = load(run, self.runs_dir)
        rounds, damage = load_rounds(store)
        if damage:
            raise AgentError(f"Run {store.id} is damaged: {damage}.")
        return store, record, rounds

    def history(self, run: str = "latest") -> History:
        store, record, rounds = self._load(run)
        s = record.settings
        stopped = f", stopped by {record.stop_reason}" if record.stop_reason else ""
        best = (f"best {speedup_line(self._best_result(record, rounds))} in round {record.best.round}"
                if record.best else "no correct candidate")
        lines = [f"Run {store.id}: problem {record.problem.name}, proposer {s.proposer}, {record.status}{stopped}; "
                 f"acceptable {s.accept:g}x, target {s.target:g}x; {len(rounds)} round(s), {best}."]
        if rounds:
            lines += ["", history_table([Past(r.n, r.eval, r.sample.approach) for r in rounds])]
        if record.message:
            lines += ["", record.message]
        return History("\n".join(lines) + "\n", store.id, record.problem.path, s.proposer, record.status,
                       record.stop_reason, record.outcome, s.accept, s.target, record.best, record.rounds)

    def best(self, run: str = "latest") -> BestKernel:
        store, record, rounds = self._load(run)
        if record.best is None:
            raise AgentError(f"Run {store.id} has no correct candidate, so no best"
                             + (f": {record.message}" if record.message else "."))
        path = store.path / record.best.candidate
        source = path.read_text()
        result = self._best_result(record, rounds)
        text = (f"Run {store.id}'s best: round {record.best.round}, {speedup_line(result)}. Its file, {path}:\n\n"
                f"```python\n{source}```\n")
        return BestKernel(text, store.id, record.best.round, result.speedup, result.speedup_interval, str(path), source)

    def show_round(self, run: str, n: int) -> RoundRecord:
        store, record, rounds = self._load(run)
        if not 1 <= n <= len(rounds):
            has = (f"rounds 1-{len(rounds)}" if len(rounds) > 1 else "round 1 alone" if rounds
                   else "no finished round yet")
            raise AgentError(f"Run {store.id} has {has}; round {n} does not exist.")
        past = [Past(r.n, r.eval, r.sample.approach) for r in rounds[:n]]
        s = record.settings
        said = told(self.prompts, past, Thresholds(s.accept, s.target), frozenset(), s.device == "cpu")
        rnd = rounds[n - 1]
        code = f"\nIts candidate:\n\n```python\n{rnd.candidate}```\n" if rnd.candidate else ""
        return RoundRecord(said + code, store.id, rnd)

    @staticmethod
    def _best_result(record: Run, rounds: list[Round]):
        return rounds[record.best.round - 1].samples[record.best.sample].eval
