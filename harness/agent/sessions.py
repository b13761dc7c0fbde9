"""An agent's session kept as a run: each candidate it evaluates with the run's id is a round,
written as `harness run` writes one (loop.keep_result, loop.keep_round), with proposer `agent (mcp)`. A
round's prompt is what the agent had been told before it: the problem as describe_problem gives it
for the first, the feedback on the round before for the others. So `harness show`, `replay`,
`compare`, `plot`, `report` and `export` read an agent's work as they read a model's.

The server holds each run it fills (the store's lock and heartbeat) until it ends; then the run
is settled as the loop settles its own, stopped by the rule its best reached or by the session's end."""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..loop.extract import approach
from ..loop.feedback import APPROACH_CHARS, Past, Thresholds, feedback_text
from ..loop.loop import conclusion, goal_reached, keep_result, keep_round, settle
from ..loop.prompts import Prompts, Reader
from ..loop.proposers import agent
from ..loop.start import new_run, reopen, same_problem
from ..problem import Problem
from ..results import EvalResult, speedup_text
from ..runs.history import HistoryError, resolve
from ..runs.settings import Evaluation, Settings
from ..runs.records import Round, Run, Sample, Status, StopReason
from ..runs.store import RunStore
from .inputs import AgentError


def told(prompts: Prompts, past: list[Past], thresholds: Thresholds, hidden: frozenset[str], cpu: bool) -> str:
    """The feedback on the last of `past` (the ones before it its history), as the loop writes it for an
    agent's run."""
    *before, last = past
    return feedback_text(prompts, last.n, last.eval, thresholds, before, last.approach, [], hidden, cpu=cpu,
                         reader=Reader.RUN)


def answer_of(source: str, note: str) -> str:
    """A round's answer: the agent's note on its approach, where it gave one, above the file."""
    return f"{note.strip()}\n\n```python\n{source}\n```\n" if note.strip() else source


@dataclass
class Session:
    """A run this server fills, held (locked) while it is open."""

    store: RunStore
    run: Run
    rounds: list[Round]
    first: str  # round 1's prompt: the problem as describe_problem gives it
    last_told: str = ""  # the feedback on the last round: the next round's prompt
    opened: float = field(default_factory=time.monotonic)
    before: float = 0.0  # seconds the run had taken when this server opened it
    lock: threading.Lock = field(default_factory=threading.Lock)  # rounds are numbered one after another

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(self.run.settings.accept, self.run.settings.target)

    @property
    def cpu(self) -> bool:
        return self.run.settings.device == "cpu"

    def elapsed(self) -> float:
        return self.before + time.monotonic() - self.opened

    def past(self) -> list[Past]:
        return [Past(r.n, r.eval, r.sample.approach) for r in self.rounds]

    def prompt(self, n: int) -> str:
        return self.first if n == 1 else self.last_told

    def begin(self, source: str, note: str) -> tuple[int, Path]:
        """The next round's prompt, answer and candidate on disk; the candidate's path."""
        n = len(self.rounds) + 1
        self.store.write_prompt(n, self.prompt(n))
        self.store.write_answer(n, 0, answer_of(source, note))
        return n, self.store.write_candidate(n, 0, source)

    def abandon(self, n: int) -> None:
        """Round n stopped before its result (cancelled, or the problem failed): set aside, as --resume does."""
        aside = self.store.set_aside(n)
        self.store.event("set_aside", round=n, path=str(aside.relative_to(self.store.path)))

    def finish(self, n: int, source: str, note: str, result: EvalResult, started: str, seconds: float,
               prompts: Prompts, hidden: frozenset[str]) -> Round:
        """Round n recorded with its result, and what the agent is told of it."""
        keep_result(self.store, n, 0, result)
        answer = answer_of(source, note)
        sample = Sample(answer=answer, origin="agent:mcp", extraction="given",
                        candidate=source, eval=result, eval_seconds=result.seconds,
                        approach=approach(answer, source, APPROACH_CHARS))
        rnd = Round(n=n, prompt=self.prompt(n), samples=[sample], started=started, seconds=seconds)
        self.rounds.append(rnd)
        keep_round(self.run, self.store, rnd, self.elapsed())
        self.last_told = told(prompts, self.past(), self.thresholds, hidden, self.cpu)
        return rnd

    def standing(self) -> tuple[str, str]:
        """The stop rule the run's best reaches ("" for none) and a line on where the run stands."""
        run, rule = self.run, goal_reached(self.run, self.thresholds)
        if rule:  # said as the loop says it when it stops there
            said = conclusion(dataclasses.replace(run, stop_reason=rule), self.rounds, self.thresholds)
            return rule.value, f"{said} You can stop: run {run.id} is done."
        best = (f"best so far {speedup_text(run.best.speedup, run.best.interval)} in round {run.best.round}" if run.best
                else "no correct candidate yet")
        return "", (f"Run {run.id}, round {len(self.rounds)}: {best}; acceptable {run.settings.accept:g}x, target "
                    f"{run.settings.target:g}x. No stop rule holds yet.")

    def close(self) -> None:
        """The session's end: the run settled (the rule its best reached, else the session's end) and let go."""
        run = self.run
        run.status, run.stop_reason = Status.FINISHED, goal_reached(run, self.thresholds) or StopReason.SESSION
        try:
            settle(run, self.store, self.rounds, self.thresholds, self.elapsed())
        finally:
            self.store.release()


class Sessions:
    """The runs this server fills, by id."""

    def __init__(self, runs_dir: Path):
        self.runs_dir = Path(runs_dir)
        self.open: dict[str, Session] = {}
        self._lock = threading.Lock()

    def start(self, problem: Problem, settings: Settings, evaluation: Evaluation, first: str,
              ceiling: Optional[float], notes: list[str]) -> Session:
        store, run = new_run(settings, evaluation, problem)
        run.ceiling, run.notes = ceiling, notes
        store.save_run(run)
        session = Session(store, run, [], first)
        with self._lock:
            self.open[run.id] = session
        return session

    def get(self, run_id: str, problem: Problem) -> Optional[Session]:
        """The open run `run_id` names (an id, a unique prefix of one, or its directory); None where it is
        none this server holds (`reopen` opens an agent's)."""
        name = Path(run_id).name if Path(run_id).is_dir() else run_id
        with self._lock:
            matches = [s for i, s in self.open.items() if i.startswith(name)]
            # an ambiguous prefix falls through to reopen, whose lookup says which runs it names
            session = self.open.get(name) or (matches[0] if len(matches) == 1 else None)
        if session:
            bound(problem, session.run)
        return session

    def reopen(self, run_id: str, problem: Problem, prompts: Prompts,
               first: Callable[[Settings, Evaluation], str]) -> Session:
        """An agent's run from an earlier session (of this server or another), opened to carry it on;
        `first` gives round 1's prompt where the run has no round yet."""
        try:
            path = resolve(run_id, self.runs_dir)
        except HistoryError as exc:
            raise AgentError(f"{exc} start_run gives a new run's id.") from None
        recorded = RunStore.open(path).load_run()  # read, not taken: a run refused here is left as it was
        if not agent.is_agents(recorded.settings):
            raise AgentError(f"Run {recorded.id} is not an agent's: its candidates came from `harness run` "
                             f"(proposer {recorded.settings.proposer}). start_run gives a run of your own.")
        bound(problem, recorded)
        store, run, rounds = reopen(path)
        run.status, run.stop_reason, run.message = Status.RUNNING, StopReason.NONE, ""
        store.save_run(run)
        try:
            opening = rounds[0].prompt if rounds else first(run.settings, run.evaluation)
        except BaseException:
            store.release()
            raise
        session = Session(store, run, rounds, opening, before=run.seconds)
        if rounds:  # the problem's own warnings, left out of a feedback, are not known before it runs
            session.last_told = told(prompts, session.past(), session.thresholds, frozenset(), session.cpu)
        with self._lock:
            self.open[run.id] = session
        return session

    def close(self) -> None:
        with self._lock:
            sessions, self.open = list(self.open.values()), {}
        for session in sessions:
            session.close()


def bound(problem: Problem, run: Run) -> None:
    """Refuse `problem` for `run` unless it is the run's own problem file, by path and by content: a
    copy elsewhere is another problem, and the run stays bound to the file it started with."""
    if Path(problem.path) != Path(run.problem.path).resolve():
        raise AgentError(f"Run {run.id} is bound to problem file {run.problem.path}, not {problem.path}: evaluate "
                         "against the run's own problem file, or start_run for this one.")
    same_problem(problem, run)


def agent_settings(problem: Problem, device: str, accept: float, target: float, runs_dir: Path) -> Settings:
    """An agent's run: no round budget nor restarts, for the agent decides when it is done."""
    if not 0 < accept <= target:
        raise AgentError(f"Need 0 < accept <= target, got accept {accept:g} and target {target:g}.")
    return Settings(problem=problem.path, proposer=agent.KIND.name, rounds=None, accept=accept, target=target,
                    restart_after=0, plateau=0, device=device, runs_dir=str(runs_dir))
