"""Starting and carrying on one run: its directory, its proposer, its first prompt, its loop.
`harness run PROBLEM` and each problem of `harness run --suite DIR` go through these."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..degenerate import problem_text
from ..device import describe
from ..engine.pool import Pool
from ..integrity.roofline import Headroom, headroom
from ..problem import Problem, ProblemError
from ..results import Timing
from ..runs.settings import Evaluation, Settings
from ..runs.records import ProblemRef, Round, Run
from ..runs.store import RunStore, utc_now
from . import red_team
from .loop import CEILING_SHARE, Loop, restore
from .observer import Observer
from .prompts import Prompts, Reader, first_prompt, system_prompt
from .proposers import kinds
from .proposers.base import Proposer, Setup


def make_proposer(settings: Settings, store: RunStore, rounds: list[Round], prompts: Prompts,
                  problem: Problem) -> Proposer:
    return kinds.get(settings.proposer).build(Setup(settings, store.path, rounds, prompts, problem))


def new_run(settings: Settings, evaluation: Evaluation, problem: Problem) -> tuple[RunStore, Run]:
    """A new run directory under settings.runs_dir, locked for this process (release() frees it)."""
    store = RunStore.create(settings.runs_dir, problem.name)
    store.lock()
    run = Run(id=store.id, settings=settings, created=utc_now(),
              problem=ProblemRef(problem.path, problem.name, problem.sha256), evaluation=evaluation)
    store.save_run(run)
    store.event("start", problem=problem.name, proposer=settings.proposer)
    return store, run


def reopen(path: str | Path) -> tuple[RunStore, Run, list[Round]]:
    """A stopped or killed run, locked for this process, its unfinished round set aside."""
    store = RunStore.open(path)
    store.lock()  # before anything is read or set aside: another process may be writing it
    try:
        run = store.load_run()
        rounds = store.load_rounds()
        if store.partial_round(len(rounds) + 1):
            aside = store.set_aside(len(rounds) + 1)
            store.event("set_aside", round=len(rounds) + 1, path=str(aside.relative_to(store.path)))
        restore(run, store, rounds)
    except BaseException:
        store.release()
        raise
    store.event("resume", rounds_done=len(rounds))
    return store, run, rounds


def same_problem(problem: Problem, run: Run) -> None:
    """Refuse to carry a run on against a problem file that changed since it started."""
    if problem.sha256 != run.problem.sha256:
        raise ProblemError(f"Problem file {problem.path} changed since run {run.id} started "
                           "(its hash differs), so the recorded rounds no longer apply to it. "
                           "Start a new run.")


def first_for(pool: Pool, prompts: Prompts, problem: Problem, settings: Settings, trials: int,
              reference: Optional[Timing] = None, reader: Reader = Reader.LOOP) -> tuple[str, list[str], Headroom]:
    """The first prompt, worded for `reader`, with the facts the reference process finds (hardware,
    inputs, peaks, the reference's own time, timed here unless given); the problem's warnings, which
    every result carries and no candidate can act on; and the headroom the reference leaves."""
    facts, environment = pool.facts()
    reference = reference or pool.reference_time()
    # the declared bytes and the reference's time are the main shape's: no ceiling for a speedup
    # that is a geometric mean over benchmark shapes
    room = headroom(reference.median, reference.overhead, {} if facts.benchmark_shapes else facts.roofline,
                    facts.peaks)
    return _first(pool, prompts, problem, settings, trials, room, reader), facts.warnings, room


def untimed_first(pool: Pool, prompts: Prompts, problem: Problem, settings: Settings, trials: int) -> str:
    """The first prompt with the reference process's facts but not its time, which it says is
    measured when the run starts: a dry run that skips the seconds of timing."""
    return _first(pool, prompts, problem, settings, trials, None)


def _first(pool: Pool, prompts: Prompts, problem: Problem, settings: Settings, trials: int,
           room: Optional[Headroom], reader: Reader = Reader.LOOP) -> str:
    facts, environment = pool.facts()  # the reference process starts on the first call; later ones read
    if settings.red_team:
        return red_team.first_prompt(prompts, problem, describe(settings.device), accept=settings.accept,
                                     trials=trials, facts=facts, environment=environment)
    return first_prompt(prompts, problem, describe(settings.device), accept=settings.accept,
                        target=settings.target, trials=trials, facts=facts, environment=environment,
                        headroom=room, backward=pool.evaluators[0].backward, unmeasured=room is None,
                        reader=reader)


def system_for(prompts: Prompts, settings: Settings) -> str:
    """The system prompt of a run with these settings: --red-team's, or the kernel engineer's."""
    return red_team.system_prompt(prompts) if settings.red_team else system_prompt(prompts,
                                                                                   cpu=settings.device == "cpu")


def ceiling_note(room: Headroom, target: float) -> str:
    """A warning when the target is beyond what the hardware allows; empty otherwise."""
    if room.ceiling is None or target <= room.ceiling:
        return ""
    return (f"The target {target:g}x is above the physical ceiling of about {room.ceiling:.2f}x: the reference "
            f"takes {room.reference_ms:.4g} ms, and a kernel at least its floor of {room.roofline.floor_ms:.4g} ms "
            f"(the problem's bytes at the measured peak) plus {room.host_ms:.2g} ms of host time for a call. "
            f"The run stops with reason `ceiling` once the best is within {1 - CEILING_SHARE:.0%} of it.")


def drive(*, run: Run, store: RunStore, rounds: list[Round], proposer: Proposer, pool: Pool,
          prompts: Prompts, problem: Problem, trials: int, observer: Observer,
          elapsed: Callable[[], float]) -> Run:
    """The loop, evaluating through `pool`, until a stop rule holds."""
    text, warnings, room = first_for(pool, prompts, problem, run.settings, trials)
    run.ceiling = room.ceiling
    if not run.settings.red_team and (note := ceiling_note(room, run.settings.target)):  # no speed goal to warn of
        observer.say(f"warning: {note}")
        if note not in run.notes:  # a resumed run measures again
            run.notes.append(note)
        store.event("ceiling", ceiling=room.ceiling, target=run.settings.target)
    if degenerate := problem_text(pool.facts()[0].degenerate):  # the first prompt tells the model too
        observer.say(f"warning: {degenerate}")
    # a resumed run goes on with the first prompt it was given
    loop = dict(run=run, store=store, rounds=rounds, proposer=proposer, evaluator=pool, prompts=prompts,
                system=system_for(prompts, run.settings), first=rounds[0].prompt if rounds else text,
                observer=observer, elapsed=elapsed, hidden_warnings=warnings)
    if run.settings.red_team:  # the audit in processes of its own, on the pool's (first) device
        with red_team.Auditor(problem, pool.evaluators[0].options) as auditor:
            return red_team.RedTeamLoop(auditor=auditor, **loop).execute()
    return Loop(**loop).execute()
