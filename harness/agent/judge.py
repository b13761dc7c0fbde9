"""The judge a coding agent calls: the Python API under `harness mcp`'s tools, one method a tool.

Each answer is a typed result (results.to_dict gives its record) whose `text` is what a model reads,
written by the loop's own functions for an agent that sends files (prompts.Reader): a problem as the
loop's first prompt puts it, a verdict as its feedback puts it. Candidates are judged as `harness eval`
judges them, by the engine, in processes of their own; an evaluation given a run's id is stored as
that run's next round (sessions.py), one without a run stands alone: no round, no table, no end."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..degenerate import Degenerate
from ..engine.building.builder import Built
from ..engine.options import EvalOptions
from ..engine.profiling.profile import Profiler, ProfileRequest
from ..engine.timing.speedups import basis_text
from ..integrity.roofline import Headroom, Peaks
from ..loop.feedback import Thresholds, feedback_text
from ..loop.profile_text import profile_lines
from ..loop.prompts import Prompts, Reader, tolerance_text
from ..loop.start import ceiling_note, first_for
from ..problem import Problem
from ..profiles import Profile
from ..results import CLOCK_NAMES, Clock, Environment, EvalResult, Timing
from ..runs.settings import Evaluation, Settings
from ..runs.store import utc_now
from .devices import Devices, Job, Warm
from .records import Records
from .inputs import AgentError, Roots, candidate_source, digest, refuse_unbuildable
from .sessions import Session, Sessions, agent_settings

# What an evaluation's `options` may set: the evaluation flags of `harness eval` that change a verdict.
OPTIONS = ("trials", "time_cap", "model_mode", "backward", "shapes", "atol", "rtol", "clock", "compile_baseline",
           "policy")


@dataclass
class Description:
    """describe_problem: the problem as the loop's first prompt states it, and its facts apart."""

    problem: str
    text: str
    device: str
    inputs: list[str] = field(default_factory=list)
    tolerance: str = ""
    reference: dict[str, Timing] = field(default_factory=dict)  # the reference alone, by clock
    headroom: Optional[Headroom] = None
    ceiling: Optional[float] = None  # the highest speedup that can be measured, where the problem declares its bytes
    hardware: list[str] = field(default_factory=list)
    environment: Optional[Environment] = None
    warnings: list[str] = field(default_factory=list)  # the problem's own
    peaks: Optional[Peaks] = None  # the device's, measured where the problem declares its bytes or flops
    degenerate: list[Degenerate] = field(default_factory=list)  # why its speedups measure nothing; `text` says it too


@dataclass
class Judged:
    """evaluate: the verdict as the loop's feedback states it, the full result, and the run's standing."""

    text: str
    result: EvalResult
    run: str = ""  # the run it was stored in, as its round `round`
    round: Optional[int] = None
    stop: str = ""  # the stop rule the run's best reached (target, ceiling), "" while none holds


@dataclass
class Profiled:
    text: str
    candidate: str  # "" for the reference
    profile: Profile


@dataclass
class Started:
    text: str
    run: str
    path: str
    accept: float
    target: float
    ceiling: Optional[float] = None


class Judge:
    """Describes problems and judges candidates under the root directories; keeps the runs it starts
    under `runs_dir`. `options` and `evaluation` are the server's: its device and limits, and the
    evaluation options a call's own `options` change."""

    def __init__(self, options: EvalOptions, evaluation: Evaluation, roots: list[Path], runs_dir: Path,
                 jobs: Optional[int] = None):
        self.options, self.evaluation = options, evaluation
        self.roots = Roots(roots)
        self.runs_dir = Path(runs_dir)
        self.devices = Devices(options, jobs)
        self.sessions = Sessions(self.runs_dir)
        self.prompts = Prompts()
        self.records = Records(self.runs_dir, self.roots, self.prompts)  # history, best, show_round
        self.scratch = Path(tempfile.mkdtemp(prefix="harness-mcp-"))  # sources given inline, outside a run

    def close(self) -> None:
        """Every run settled and let go, every process ended."""
        try:
            self.sessions.close()
        finally:
            self.devices.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    # --- describe_problem, start_run ------------------------------------------------

    def describe(self, problem: str, job: Optional[Job] = None) -> Description:
        found = self.roots.problem(problem)
        with self.devices.pool(found, self.evaluation) as warm:
            return self._describe(found, warm, Thresholds(), job or Job(), Reader.CALL)

    def _describe(self, problem: Problem, warm: Warm, thresholds: Thresholds, job: Job, reader: Reader) -> Description:
        pool = warm.pool
        # the figure the problem's evaluations share (timing/alone.py): the same timing, anew once 5 minutes old
        # or once an evaluation timed it again, so it agrees with what later evaluations read alone
        with job.watching(), self.devices.timing(pool.evaluators[:1], job) as evaluator:
            job.phase("loading the problem")
            pool.facts()
            job.phase("timing the reference")
            warm.reference = evaluator.time_reference_clocks()
        facts, environment = pool.facts()
        first = pool.evaluators[0]
        settings = Settings(accept=thresholds.accept, target=thresholds.target, device=self.options.device)
        text, warnings, room = first_for(pool, self.prompts, problem, settings, first.options.trials,
                                         reference=warm.reference[first.measure.headline()], reader=reader)
        clocks = "; ".join(f"{CLOCK_NAMES[Clock(clock)]} {t.median:.4g} ms (IQR {t.iqr:.2g} ms, {t.n} samples)"
                           for clock, t in warm.reference.items())
        text += f"\nThe reference alone, on each clock this device has: {clocks}.\n"
        return Description(problem.path, text, self.options.device, list(facts.inputs), tolerance_text(problem),
                           dict(warm.reference), room, room.ceiling, list(facts.hardware), environment, warnings,
                           facts.peaks, list(facts.degenerate))

    def start_run(self, problem: str, accept: float = Thresholds.accept, target: float = Thresholds.target,
                  options: Optional[dict[str, Any]] = None, job: Optional[Job] = None) -> Started:
        found = self.roots.problem(problem)
        evaluation = self._evaluation(options)
        settings = agent_settings(found, self.options.device, accept, target, self.runs_dir)
        with self.devices.pool(found, evaluation) as warm:
            described = self._describe(found, warm, Thresholds(accept, target), job or Job(), Reader.RUN)
        note = ceiling_note(described.headroom, target)
        session = self.sessions.start(found, settings, evaluation, described.text, described.ceiling,
                                      [note] if note else [])
        run = session.run
        text = (f"Run {run.id} started for {found.name}: acceptable {accept:g}x, target {target:g}x; stored in "
                f"{session.store.path}. Pass run=\"{run.id}\" to evaluate: each evaluation is kept as a round, and "
                "each result says where the run stands.\n") + (f"{note}\n" if note else "")
        return Started(text, run.id, str(session.store.path), accept, target, described.ceiling)

    # --- evaluate, profile ------------------------------------------------------------

    def evaluate(self, problem: str, source: Optional[str] = None, path: Optional[str] = None,
                 run: Optional[str] = None, options: Optional[dict[str, Any]] = None, note: str = "",
                 job: Optional[Job] = None) -> Judged:
        """Build, check and time a candidate (its text, or a file under the roots) as `harness eval` does;
        with `run`, kept as the run's next round. `note`: what the candidate tries, for the rounds' table."""
        job = job or Job()
        found = self.roots.problem(problem)
        text, file = candidate_source(self.roots, source, path)
        refuse_unbuildable(text, f"Candidate file {path}" if path else "The candidate's source", found,
                           self.options.device)
        evaluation = self._evaluation(options)  # unknown keys refused by name, with a run or without
        if run is not None:
            if options:
                raise AgentError(f"Run {run} evaluates under the options it was started with; leave `options` out, "
                                 "or start_run with the options you want.")
            session = self._session(run, found, job)
            with session.lock, self.devices.pool(found, session.run.evaluation) as warm:
                return self._in_run(session, warm, text, note, job)
        with self.devices.pool(found, evaluation) as warm:
            result = self._judge(warm, file or self._scratch_file(text), job)
            # a verdict alone: its number and the rounds' table are not shown without a run
            said = feedback_text(self.prompts, 1, result, Thresholds(), [], hidden=_hidden(warm),
                                 cpu=self.options.device == "cpu", reader=Reader.CALL)
        return Judged(_with_basis(said, result), result)

    def _in_run(self, session: Session, warm: Warm, source: str, note: str, job: Job) -> Judged:
        n, candidate = session.begin(source, note)
        started, t0 = utc_now(), time.monotonic()
        try:
            result = self._judge(warm, candidate, job)
        except BaseException:
            session.abandon(n)
            raise
        session.finish(n, source, note, result, started, time.monotonic() - t0, self.prompts, _hidden(warm))
        stop, standing = session.standing()
        return Judged(_with_basis(session.last_told, result) + f"\n## The run\n{standing}\n", result,
                      session.run.id, n, stop)

    def _judge(self, warm: Warm, candidate: Path, job: Job) -> EvalResult:
        """The build (ahead, with the others'), then the check and timing on a device of the pool in turn."""
        pool = warm.pool
        with job.watching():
            with self.devices.building(job):
                built = pool.builder.build(candidate, job.phase)
        if built.failed:
            return built.result
        with self.devices.timing(pool.evaluators, job) as evaluator, job.watching(evaluator):
            return evaluator.run(built, job.phase)

    def profile(self, problem: str, source: Optional[str] = None, path: Optional[str] = None,
                kernel: Optional[str] = None, job: Optional[Job] = None) -> Profiled:
        """One forward of a candidate (or, given neither source nor path, the reference) under ncu, else
        the torch profiler: its heaviest kernels and the findings, as `harness profile` gives them (on a CPU,
        with perf's samples of its calls)."""
        job = job or Job()
        found = self.roots.problem(problem)
        built: Optional[Built] = None
        with self.devices.pool(found, self.evaluation) as warm:
            pool = warm.pool
            if source is not None or path is not None:
                text, file = candidate_source(self.roots, source, path)
                where = f"Candidate file {path}" if path else "The candidate's source"
                refuse_unbuildable(text, where, found, self.options.device)
                with job.watching(), self.devices.building(job):
                    built = pool.builder.build(file or self._scratch_file(text), job.phase)
                if built.failed:
                    raise AgentError(f"{where} did not build, so there is nothing to profile. "
                                     f"{built.result.explanation}")
            profiler = Profiler(self.options.device)
            with self.devices.timing(pool.evaluators, job) as evaluator, job.watching(evaluator, profiler), \
                    evaluator.children.device_lock(job.phase):
                job.phase("profiling")
                options = evaluator.options
                found_profile = profiler(ProfileRequest(
                    found.path, str(built.path) if built else None, options.device, kernel,
                    time_limit_s=options.profile_time_limit, env=options.child_env(built.entry if built else None),
                    **evaluator.children.seeds))
        # why not ncu, where the device has it; on a CPU server the torch profiler is the profiler
        note = found_profile.note if found_profile.note and self.options.device != "cpu" else ""
        lines = ([note] if note else []) + profile_lines(found_profile)
        return Profiled("\n".join(lines) + "\n", str(built.path) if built else "", found_profile)

    # --- helpers ------------------------------------------------------------------------

    def _evaluation(self, options: Optional[dict[str, Any]]) -> Evaluation:
        """The server's evaluation options with a call's own over them."""
        given = {k: v for k, v in (options or {}).items() if v is not None}
        unknown = sorted(set(options or {}) - set(OPTIONS))
        if unknown:
            raise AgentError(f"Unknown evaluation option(s) {', '.join(unknown)}: `options` takes only "
                             f"{', '.join(OPTIONS)}.")
        return dataclasses.replace(self.evaluation, **given)

    def _session(self, run: str, problem: Problem, job: Job) -> Session:
        """The run `run` names: open in this server, else an agent's run under runs_dir, opened again."""
        if Path(run).is_dir():  # a run's directory named outright: it is written to, so only under the roots
            self.roots.inside(run, "Run directory")
        session = self.sessions.get(run, problem)
        if session is not None:
            return session

        def first(settings: Settings, evaluation: Evaluation) -> str:
            with self.devices.pool(problem, evaluation) as warm:
                return self._describe(problem, warm, Thresholds(settings.accept, settings.target), job, Reader.RUN).text

        return self.sessions.reopen(run, problem, self.prompts, first)

    def _scratch_file(self, source: str) -> Path:
        path = self.scratch / f"candidate-{digest(source)[:12]}.py"
        path.write_text(source)
        return path


def _hidden(warm: Warm) -> frozenset[str]:
    """The problem's own warnings, which every result carries and no candidate can act on."""
    return frozenset(warm.pool.evaluators[0].problem_warnings)


def _with_basis(said: str, result: EvalResult) -> str:
    basis = basis_text(result)
    return said + (f"\n## How it was timed\n{basis}\n" if basis else "")
