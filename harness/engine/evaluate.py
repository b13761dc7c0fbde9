"""One evaluation: build, check, time, and a verdict.

The harness process only orchestrates. It starts the reference process (the
oracle) once per problem and device, a build child per uncached candidate, and
a fresh candidate worker per evaluation; it relays trial inputs and candidate
outputs between them as raw bytes and turns every way a child can end into a
verdict.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, TypeVar

from ..device import gpu_arch, require_cuda
from ..errors import HarnessError
from ..integrity import roofline, static
from ..files import new_seed
from ..problem import Problem, ProblemError, load_problem
from ..results import (BuildResult, CheckResult, EvalResult, Profile, Retimed, ShapeTiming, ShapeVariant, Timing,
                       Verdict, from_dict, shape_label, speedup_text, to_dict)
from ..stats import geomean
from . import build as builds
from . import speedups
from .cores import split_cores
from .device_lock import DeviceLock, device_key
from .environment import collect_environment
from .profile import TIME_LIMIT_S, Profiler, ProfileRequest
from .process import (MAX_LOG_BYTES, MAX_PROCESSES, REGISTRY, Child, ChildBrokeProtocol, ChildDied, ChildTimeout, Limits,
                      default_host_memory, prune_logs)
from .protocol import (PARK_BYTES, BuildDone, BuildSpec, CandidateReady, CandidateSpec, Checked, Command, Guarded,
                       OracleHolding, OracleReady, OracleSpec, ReferenceTimed, Reply, Request, Rule, ShapeSet, Timed,
                       TrialMade, TrialOutputs)

Phase = Callable[[str], None]
R = TypeVar("R", bound=Reply)


@dataclass
class EvalOptions:
    device: str = "cpu"
    trials: int = 5
    build_timeout: float = 900.0
    run_timeout: float = 600.0
    cache_dir: Optional[Path] = None
    compile_baseline: bool = False
    time_cap: float = 10.0
    target_rel_se: Optional[float] = None  # relative standard error of each median; None: by device
    min_samples: int = 10
    gpu: Optional[int] = None  # physical GPU index; children see only that GPU
    policy: str = "warn"  # "strict": static findings (reference op, torch.compile, ...) reject
    shapes: str = "warn"  # other shapes: "warn" on a failure, "strict" rejects, "off" skips the check
    logs_dir: Optional[Path] = None  # where run logs go; default inside the cache
    max_host_memory: Optional[int] = None  # bytes for a candidate's whole process tree; None: default_host_memory()
    max_processes: int = MAX_PROCESSES
    max_log_bytes: int = MAX_LOG_BYTES
    # "train": both models run in the mode they are constructed in (training, as KernelBench
    # runs them: BatchNorm on batch statistics, dropout active); "eval": both in eval()
    model_mode: str = "train"
    # bytes the problem may use on its device, both processes together; None: what the device
    # has free when the reference starts (tests set it to see the fit refusal)
    memory_limit: Optional[int] = None
    # after a correct verdict, one forward under ncu (else the torch profiler), for the loop's feedback
    profile: bool = False
    profile_kernel: Optional[str] = None  # ncu's --kernel-name regex; None: every kernel, up to LAUNCH_COUNT
    profile_time_limit: float = TIME_LIMIT_S
    # allclose tolerances for every dtype, over the problem's (KernelBench's leaderboard used 1e-2)
    atol: Optional[float] = None
    rtol: Optional[float] = None
    # forward and backward checked and timed as one call (workers/backward.py); a problem's BACKWARD = True sets it too
    backward: bool = False

    def rel_se_target(self) -> float:
        """Queued GPU samples are steady enough to stop at 0.2%; a CPU's wander more."""
        if self.target_rel_se is not None:
            return self.target_rel_se
        return 0.01 if self.device == "cpu" else 0.002

    def resolved_cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else builds.default_cache_dir()


class DoesNotFit(ProblemError):
    """The problem needs more memory than its device has free; said before the first trial."""


class NoBackward(ProblemError):
    """Under --backward: the problem's outputs have no gradient (argmax), so there is no backward to check."""


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def footprint(ready: OracleReady) -> int:
    """Bytes one evaluation of the problem holds on its device at the most, over all processes:
    in the reference process one input draw, the reference's outputs and the candidate's outputs
    it compares; in the candidate worker one input draw and the candidate's outputs (timing
    draws one set at a time); a forward's workspace; two copies of the parameters (the reference's
    in one process or the other, the candidate's), and a third below PARK_BYTES, which is not
    parked; the timing's cache-flush buffer; and the reference's two twins where they are made."""
    params = ready.parameter_bytes
    twins = 2 * params if 2 * params <= placement_budget(ready) else 0
    return (2 * (ready.input_bytes + ready.output_bytes) + ready.output_bytes + ready.workspace_bytes
            + 2 * params + (params if params < PARK_BYTES else 0) + ready.flush_bytes + twins)


def in_process_need(ready: OracleReady) -> int:
    """Bytes an in-process evaluation (KernelBench's) holds at the most: one input draw, both
    models' outputs and parameters, the workspace of the forward that runs beside the other's
    outputs, and the cache-flush buffer. The measure of a frugal engine."""
    return (ready.input_bytes + 2 * ready.output_bytes + ready.workspace_bytes + 2 * ready.parameter_bytes
            + ready.flush_bytes)


def fit_refusal(problem: Problem, ready: OracleReady, device: str, limit: Optional[int],
                host_limit: Optional[int]) -> Optional[str]:
    """The paragraph that refuses a problem too big for its device (footprint), or None when it fits."""
    inputs, outputs = ready.input_bytes, ready.output_bytes
    kept = in_process_need(ready)
    needed = footprint(ready)
    where = "the GPU" if device != "cpu" else "the host"
    workspace = f"; a forward's own workspace {_gb(ready.workspace_bytes)}" if ready.workspace_bytes else ""
    free = limit if limit is not None else ready.available_bytes
    if free and needed > free:
        given = " (the limit given)" if limit is not None else " free"
        return (f"Problem file {problem.path} does not fit: one evaluation needs about {_gb(needed)} "
                f"(inputs {_gb(inputs)}, outputs {_gb(outputs)}, kept copies {_gb(kept)}: the reference's outputs "
                f"and the candidate's side by side, and the timing's cache flush{workspace}); {where} has "
                f"{_gb(free)}{given}. "
                "Make get_inputs() smaller, or use a device with more memory.")
    worker = inputs + outputs + ready.flush_bytes
    if device == "cpu" and host_limit and worker > host_limit:
        return (f"Problem file {problem.path} does not fit: the candidate's process needs about {_gb(worker)} "
                f"(inputs {_gb(inputs)}, outputs {_gb(outputs)}), over the host-memory limit of {_gb(host_limit)} "
                "(--max-host-memory). Raise the limit or make get_inputs() smaller.")
    return None


# the reference's twins (placement_spread) may take at most this share of the in-process need, or
# PLACEMENT_FLOOR where that is more: a small model's twins must be measured (EfficientNet-B1's 31 MB
# of parameters: two instances in one process differ by 1-1.6% on an H100, more than a small share allows)
PLACEMENT_SHARE = 0.1
PLACEMENT_FLOOR = 1 << 30


def placement_budget(ready: OracleReady) -> int:
    return int(max(PLACEMENT_SHARE * in_process_need(ready), PLACEMENT_FLOOR))

# inputs up to this size get the CUDA graph's replay on new inputs (a second copy of them)
GRAPH_SECOND_COPY_BYTES = 1 << 30


class _Stop(Exception):
    """Ends an evaluation early with a finished result."""

    def __init__(self, verdict: Verdict, explanation: str, **details):
        super().__init__(explanation)
        self.verdict, self.explanation, self.details = verdict, explanation, details
        self.build: Optional[BuildResult] = None

    def fill(self, result: EvalResult) -> None:
        result.verdict, result.explanation = self.verdict, self.explanation
        result.build = self.build or result.build
        result.details.update(self.details)


@dataclass
class Built:
    """A candidate after its build step; `failed` means `result` is already final."""

    path: Path
    entry: Optional[builds.BuildEntry]
    result: EvalResult
    started: float
    failed: bool = False


_MANY_CORES = (os.cpu_count() or 1) >= 8
ORACLE_START_S = 120.0
DEVICE_WAIT_S = 24 * 3600.0  # the most a prepared reference waits for another's timing to end
CHECKING = "checking"  # the phase a candidate enters once its worker and the reference are ready
# references timed both beside the candidate and alone, each compared with itself
_BESIDE_AND_ALONE = ("reference", "reference_defaults")
# The reference beside the candidate against the reference alone: a ratio past
# these is reported, and past the second refused (noise stays well under both).
REFERENCE_SLOWDOWN_WARN = 1.15
REFERENCE_SLOWDOWN_REJECT = 1.5
# ...and a refused slowdown must also cost this much time: sub-millisecond calls differ
# more than 1.5x between two processes on a small CPU machine (0.10 against 0.18 ms
# seen on 2 cores), far less on a GPU.
REFERENCE_SLOWDOWN_MIN_MS = {"cpu": 0.5, "cuda": 0.05}
# Timings after the first that must all show the slowdown before a refusal: a Python-loop
# reference on a shared 2-core machine has read 1.6x slower beside a harmless candidate twice
# in a row, its time alone wandering 2.8-5.0 ms from one second to the next.
SLOWDOWN_RETIMES = 2


def _quiet(phase: str) -> None:
    pass


# The build children running in this process, any evaluator's (a bench runs many): the retimes
# before an accusation stop them, so the compiler's load is not on the candidate's side alone.
_RUNNING_BUILDS: set[Child] = set()
_BUILDS_LOCK = threading.Lock()


@contextmanager
def _paused(children: list[Child]) -> Iterator[None]:
    """These children stopped (SIGSTOP) while the block runs."""
    for child in children:
        child.pause()
    try:
        yield
    finally:
        for child in children:
            child.resume()


def _builds_paused():
    with _BUILDS_LOCK:
        return _paused(list(_RUNNING_BUILDS))


def _child_error(reply: Reply, doing: str) -> _Stop:
    verdict = {"compile_error": Verdict.COMPILE_ERROR, "import_error": Verdict.IMPORT_ERROR}.get(
        reply.error, Verdict.RUNTIME_ERROR)
    exc = reply.exception or None
    message = str(reply.message).strip()
    first = message.splitlines()[0] if message else ""
    what = f"it raised {exc}: {first}" if exc else first
    return _Stop(verdict, f"{verdict.sentence} While {doing}, {what}"[:1500],
                 exception=exc, message=message[:4000], traceback=str(reply.traceback)[-4000:])


def _read(kind: type[R], message) -> R:
    """A worker's reply as the type the protocol says; a reply that is not one, or not the
    one due now (an error reply aside), counts as forged."""
    sent = message.header.get("kind")
    try:
        reply = from_dict(kind, message.header)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its reply is not a {kind.__name__}: "
                    f"the reply was forged ({type(exc).__name__}: {exc}).", channel="malformed reply") from None
    if sent != kind.__name__ and not (sent == Reply.__name__ and reply.error):
        raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} On the harness's private channel it sent "
                    f"{'a ' + str(sent) if sent else 'a message of no kind'} where a {kind.__name__} was due: "
                    "the reply was forged or out of order.", channel="reply out of order")
    return reply


def _compile_errors(build: BuildResult, note: str = "") -> str:
    return (f"{Verdict.COMPILE_ERROR.sentence} {note}First errors:\n" + "\n".join(build.first_errors)
            + f"\nFull log: {build.log_path}")


def _died(doing: str, status: str, child: Child) -> _Stop:
    log = child.log_path
    if child.breach:
        return _Stop(Verdict.RUNTIME_ERROR, f"The candidate went over a limit while {doing}: {child.breach}, "
                     f"and its processes were stopped; see {log}.", limit=child.breach, log=str(log),
                     peak_host_memory=child.peak_memory)
    return _Stop(Verdict.CRASHED, f"The worker {status} while {doing}; see {log}.", exit=status, log=str(log))


def _broke_protocol(doing: str, what: str) -> _Stop:
    return _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} While {doing}, its process wrote to the "
                 f"harness's private channel something that is not a message of the protocol ({what}).",
                 channel=what)


@dataclass(frozen=True)
class Deadline:
    """When a step must end, and what its limit is made of: the message that names a step
    which ran past it says both."""

    at: float  # time.monotonic()
    limit: float  # seconds
    basis: str  # "the run timeout", "the time cap's 10 s of sampling, then the run timeout"

    @property
    def spent(self) -> float:
        return time.monotonic() - (self.at - self.limit)


def after(limit: float, basis: str) -> Deadline:
    return Deadline(time.monotonic() + limit, limit, basis)


def _timeout(doing: str, deadline: Deadline, log: Path) -> _Stop:
    return _Stop(Verdict.TIMEOUT, f"The candidate was still {doing} after {deadline.limit:.0f} s "
                 f"({deadline.basis}) and was stopped; see {log}.", limit_s=deadline.limit, log=str(log))


class Evaluator:
    """Evaluates candidates for one problem on one device, keeping the reference process."""

    def __init__(self, problem: str | Path | Problem, options: Optional[EvalOptions] = None,
                 keep_spare: bool = True):
        self.options = options or EvalOptions()
        require_cuda(self.options.device)  # before the problem is blamed for a missing GPU
        self.problem = problem if isinstance(problem, Problem) else load_problem(problem)
        self.backward = self.options.backward or self.problem.backward
        self.cache = self.options.resolved_cache()
        self.logs = Path(self.options.logs_dir) if self.options.logs_dir else self.cache / "logs"
        prune_logs(self.logs)
        self.registry = self.cache / REGISTRY
        self.limits = Limits(self.options.max_host_memory or default_host_memory(), self.options.max_processes,
                             self.options.max_log_bytes)
        self.arch = gpu_arch(self.options.device, self.options.gpu)
        self.cores = split_cores(self.options.device)  # timing processes on their own cores, builds on the rest
        self.seeds = {"init_seed": new_seed(), "param_seed": new_seed()}
        self.oracle: Optional[Child] = None
        self.oracle_info = OracleReady()
        self.problem_warnings: list[str] = []
        self._spare: Optional[Child] = None
        self._staged: Optional[tuple[Built, Child]] = None  # the next candidate, importing ahead
        self._blank_oracle: Optional[Child] = None  # a reference process importing, not yet told the problem
        self.keep_spare = keep_spare  # for evaluators that will see more than one candidate
        self._spawned = 0
        self._current: Optional[Child] = None  # the worker in flight
        self._closed = False  # after close, a timing thread still running starts no process
        self.environment = None
        self.memory: dict[str, dict[str, int]] = {}  # peak bytes by process, as their replies said
        # by shape label ("" the main shape): placement_spread, measured once per problem and shape
        self.placement: dict[str, Optional[float]] = {}  # None: the model is too big to copy twice
        self.profiler = Profiler(self.options.device) if self.options.profile else None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._end_children()

    def _end_children(self) -> None:
        if self.profiler:
            self.profiler.stop()
        if self._current:
            self._current.kill()
        if self._spare:
            self._spare.kill()
            self._spare = None
        if self._staged:
            self._staged[1].kill()
            self._staged = None
        if self._blank_oracle:
            self._blank_oracle.kill()
            self._blank_oracle = None
        if self.oracle:
            self.oracle.stop()
            self.oracle = None

    # -- the reference process -------------------------------------------------

    def start_oracle(self, hold_device: bool = False) -> None:
        """Start the reference process; a broken problem raises ProblemError. `hold_device`: it
        loads the problem holding the device's lock, waiting (its imports done) for any timing there."""
        if self.oracle and self.oracle.alive():
            return
        blank, self._blank_oracle = self._blank_oracle, None
        self.oracle = blank if blank and blank.alive() else self._spawn_oracle()
        self.oracle.send(to_dict(OracleSpec(self.problem.path, self.options.device, self._tolerances(),
                                            str(self.cache), model_mode=self.options.model_mode,
                                            device_key=self._device_key if hold_device else "",
                                            backward=self.backward,
                                            grad_tolerances=self._tolerances(gradients=True),
                                            grad_rounding=self._grad_rounding(),
                                            **self.seeds)))
        if hold_device:
            self._oracle_says(after(DEVICE_WAIT_S, "the longest wait for another timing"), OracleHolding,
                              "waiting for the device")
        # the reference's own start (torch's import, the problem's lint) is no candidate's run: a short
        # --run-timeout meant for candidates must not fail it on a busy machine
        start = max(self.options.run_timeout, ORACLE_START_S)
        ready = self._oracle_says(after(start, "the longer of the run timeout and the reference's start limit"),
                                  OracleReady, "loading the problem")
        self.oracle_info = ready
        self.problem_warnings = list(ready.warnings)
        if self.backward and ready.no_backward:
            self._end_children()
            raise NoBackward(f"Problem file {self.problem.path}: {ready.no_backward}.")
        refusal = fit_refusal(self.problem, ready, self.options.device, self.options.memory_limit,
                              self.limits.host_memory)
        if refusal:
            self._end_children()
            raise DoesNotFit(refusal)
        self.environment = collect_environment(self.options.device, ready.device_name, ready.capability)

    def _tolerances(self, gradients: bool = False) -> dict[str, list[float]]:
        return self.problem.tolerance_table(self.options.atol, self.options.rtol, gradients)

    def _grad_rounding(self) -> bool:
        """The gradients' atol gains the reference's own rounding unless a tolerance was given."""
        p, o = self.problem, self.options
        return self.backward and all(t is None for t in (p.grad_atol, p.grad_rtol, o.atol, o.rtol))

    def _spawn_oracle(self, spare: bool = False) -> Child:
        log = self.logs / f"oracle-{self.problem.name}-{os.getpid()}-{self.options.gpu or 0}.log"
        return Child("oracle", log, env=self._start_env(spare), registry=self.registry)

    def spawn(self) -> None:
        """Start the reference process and a spare worker for the first candidate without the
        problem, at low priority: they import torch (seconds) but hold no GPU memory until
        start_oracle and the first candidate. A bench starts a problem so while others are timed."""
        if self._spare is None:
            self._spare = self._spawn_worker(spare=True)
        if not (self.oracle and self.oracle.alive()) and self._blank_oracle is None:
            self._blank_oracle = self._spawn_oracle(spare=True)

    def prepare(self) -> None:
        """Start the reference process, and a spare worker importing beside it for the first
        candidate (a bench does this for the next problem while the current one is checked).
        Both import torch at low priority; the reference then loads its problem holding the
        device (the oracle takes its lock), so its calls never run beside a timing there."""
        self.spawn()
        self.start_oracle(hold_device=True)

    # -- one candidate -----------------------------------------------------------

    def evaluate(self, candidate: str | Path, on_phase: Optional[Phase] = None) -> EvalResult:
        """Build, check and time one candidate."""
        return self.run(self.build(candidate, on_phase), on_phase)

    def build(self, candidate: str | Path, on_phase: Optional[Phase] = None) -> Built:
        """The build step alone: needs CPU cores only, so a pool runs many at once."""
        started = time.monotonic()
        path = Path(candidate)
        result = EvalResult(Verdict.CRASHED, "", problem=self.problem.path, candidate=str(path),
                            model_mode=self.options.model_mode, tolerance=self._tolerances()["float32"],
                            tolerance_given=self.options.atol is not None or self.options.rtol is not None,
                            backward=self.backward)
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            result.verdict, result.explanation = Verdict.IMPORT_ERROR, f"Candidate file {path} cannot be read: {exc}."
            return Built(path, None, result, started, failed=True)
        result.candidate_hash = hashlib.sha256(source.encode()).hexdigest()
        report = static.analyse(source, self.problem.source)
        result.details["static"] = to_dict(report)  # for a person; no code reads it back
        if unparsed := static.syntax_error(report):  # a build could only end in a failed import
            result.verdict = Verdict.IMPORT_ERROR
            result.explanation = (f"{Verdict.IMPORT_ERROR.sentence} It is not valid Python, so nothing was "
                                  f"built: {unparsed}.")
            return Built(path, None, result, started, failed=True)
        refusal = static.static_verdict(report, self.options.policy)
        if refusal:
            result.verdict, result.explanation = Verdict.REJECTED, f"{Verdict.REJECTED.sentence} {refusal}"
            return Built(path, None, result, started, failed=True)
        result.warnings.extend(static.warnings(report))
        entry = builds.BuildEntry(self.cache, source, self.arch)
        (on_phase or _quiet)("building")
        try:
            # nothing to compile: the worker's own import is the whole build
            result.build = (BuildResult(ok=True, seconds=0.0, key=entry.key) if "no_kernel" in report.codes()
                            else self._build(path, entry))
            result.phase_seconds["build"] = result.build.seconds  # 0 for a cached build
        except _Stop as stop:
            stop.fill(result)
            result.seconds = time.monotonic() - started
            return Built(path, entry, result, started, failed=True)
        return Built(path, entry, result, started)

    def run(self, built: Built, on_phase: Optional[Phase] = None, upcoming: Optional[Built] = None) -> EvalResult:
        """Check and time a built candidate on this evaluator's device; `upcoming`, the
        candidate that will run next, starts importing while this one is checked."""
        result = built.result
        if built.failed:
            return result
        notify = on_phase or _quiet
        phases = result.phase_seconds
        mark = time.monotonic()
        worker = self._current = self._worker_for(built)  # imports while the reference process comes up
        if upcoming is not None:  # after this one has its worker: the warm spare goes to the candidate due first
            self._stage(upcoming)
        if self.keep_spare and _MANY_CORES:  # imports torch during this evaluation, for the one after upcoming
            self._spare = self._spare or self._spawn_worker(spare=True)
        try:
            self.start_oracle()
            result.environment = self.environment
            result.warnings.extend(self.problem_warnings)
            result.grad_allowance = dict(self.oracle_info.grad_allowance)
            self._await_ready(worker, result)
            phases["start"], mark = time.monotonic() - mark, time.monotonic()
            notify(CHECKING)
            result.check = self._check(worker, result)
            phases["check"], mark = time.monotonic() - mark, time.monotonic()
            notify("timing")
            if self.oracle_info.benchmark_shapes:
                result.timings = self._time_at_benchmark_shapes(worker, result, notify)
            else:
                with self._holding_device("timing", notify, result):
                    result.timings = self._time(worker, result, shape="")
            phases["time"], mark = time.monotonic() - mark, time.monotonic()
            # after timing: a candidate that breaks at another shape may leave a CUDA context unusable
            notify("checking other shapes")
            self._check_graph(worker, result)
            self._check_shapes(worker, result)
            phases["shapes"] = time.monotonic() - mark
            shapes = result.benchmark_shapes
            result.baselines = (speedups.over_shapes(shapes) if shapes
                                else speedups.baselines(result.timings, self.placement.get("") or 0.0))
            headline = result.baselines[0]
            result.speedup, result.speedup_interval = headline.speedup, headline.interval
            self._judge_speed(result)
            result.verdict = Verdict.CORRECT
            over, candidate_ms = ((f"Geometric mean over {len(shapes)} benchmark shapes: candidate",
                                   geomean([s.candidate_ms for s in shapes])) if shapes
                                  else ("Candidate", result.timings["candidate"].median))
            result.explanation = (f"{Verdict.CORRECT.sentence} {over} {candidate_ms:.4g} ms, {headline.label} "
                                  f"{headline.median_ms:.4g} ms: "
                                  f"{speedup_text(result.speedup, result.speedup_interval)}"
                                  f"{' (forward and backward)' if self.backward else ''}.")
            if self.profiler:
                worker.stop()  # its GPU memory and context are not the profiled forward's
                mark = time.monotonic()
                self._profile(built, result, notify)
                phases["profile"] = time.monotonic() - mark
        except _Stop as stop:
            stop.fill(result)
        finally:
            worker.stop()
            self._current = None
            # An evaluator used for several candidates keeps a spare worker
            # importing torch for the next one; on a machine with few cores
            # started only now, so it never competes with a timing.
            if self.keep_spare and self.oracle and self._spare is None:
                self._spare = self._spawn_worker(spare=True)
            result.seconds = time.monotonic() - built.started
            result.details["peak_memory"] = {role: dict(use) for role, use in self.memory.items()}
            self.memory.pop("candidate_worker", None)  # the next candidate has a worker of its own
        return result

    @contextmanager
    def _holding_device(self, doing: str, notify: Phase, result: EvalResult) -> Iterator[None]:
        """The device to this evaluation alone, across harness processes, while it times or profiles.

        Nothing else of ours runs meanwhile: the staged worker touches the GPU, and on a machine
        with few cores a spare importing torch takes a core the timing needs (and would slow the
        reference beside the candidate but not alone, which reads as the candidate's doing)."""
        paused = [c for c in (self._staged[1] if self._staged else None,
                              None if _MANY_CORES else self._spare) if c]
        with self._device_lock(notify) as lock:
            if lock.waited_for:
                # a wait for another problem of this process (a suite) is the plan, not news
                if lock.waited_for != str(os.getpid()):
                    result.warnings.append(f"{doing} waited for another harness process (pid {lock.waited_for}) "
                                           "to finish timing on this device")
                notify(doing)
            with _paused(paused):
                yield

    def _profile(self, built: Built, result: EvalResult, notify: Phase) -> None:
        """One forward of a correct candidate under the profiler, in a process of its own. A
        profile that fails or runs past its limit is the profile's note, not the candidate's verdict."""
        notify("profiling")
        request = ProfileRequest(self.problem.path, str(built.path), self.options.device, self.options.profile_kernel,
                                 time_limit_s=self.options.profile_time_limit, env=self._env(built.entry), **self.seeds)
        started = time.monotonic()
        with self._holding_device("profiling", notify, result):
            try:
                result.profile = self.profiler(request)
            except (HarnessError, OSError, ValueError) as exc:
                result.profile = Profile("none", note=f"no profile: {exc}", seconds=time.monotonic() - started)

    def _build(self, path: Path, entry: builds.BuildEntry) -> BuildResult:
        cached = entry.recorded()
        if cached and cached.ok:
            return BuildResult(ok=True, seconds=0.0, cached=True, key=entry.key, log_path=cached.log_path)
        if cached:  # a compile error belongs to the source: the same file fails the same way again
            failed = BuildResult(False, 0.0, cached=True, key=entry.key, log_path=cached.log_path,
                                 first_errors=cached.first_errors)
            stop = _Stop(Verdict.COMPILE_ERROR, _compile_errors(failed, "(cached: this source failed before) "))
            stop.build = failed
            raise stop
        started = time.monotonic()
        entry.dir.mkdir(parents=True, exist_ok=True)
        child = Child("build", entry.log_path, env={**self._env(entry), **self.cores.build_env()}, limits=self.limits,
                      registry=self.registry)
        limit = self.options.build_timeout
        with _BUILDS_LOCK:
            _RUNNING_BUILDS.add(child)
        try:
            child.send(to_dict(self._import_spec(path, entry)))
            done = _read(BuildDone, child.recv(started + limit))
        except ChildTimeout:
            raise _timeout("building", Deadline(started + limit, limit, "the build timeout"), entry.log_path) from None
        except ChildDied as exc:
            raise _died("building", exc.status, child) from None
        except ChildBrokeProtocol as exc:
            raise _broke_protocol("building", str(exc)) from None
        finally:
            with _BUILDS_LOCK:
                _RUNNING_BUILDS.discard(child)
            child.stop()
        seconds = time.monotonic() - started
        if done.error:
            stop = _child_error(done, "importing (building) the candidate")
            errors = builds.first_errors(builds.log_tail(entry.log_path))
            stop.build = BuildResult(False, seconds, key=entry.key, log_path=str(entry.log_path),
                                     first_errors=errors)
            if stop.verdict is Verdict.COMPILE_ERROR and errors:
                stop.explanation = _compile_errors(stop.build)
                entry.record(stop.build)
            raise stop
        record = BuildResult(True, seconds, key=entry.key, log_path=str(entry.log_path))
        entry.record(record)
        return record

    def _env(self, entry: Optional[builds.BuildEntry] = None) -> dict:
        env = entry.env() if entry else {}
        if self.options.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.options.gpu)
        return env

    def _start_env(self, spare: bool) -> dict:
        # a spare imports torch at low priority, so a timing running meanwhile keeps its CPU
        return {**self._env(), **self.cores.timing_env(), **({"HARNESS_START_NICE": "10"} if spare else {})}

    @property
    def _device_key(self) -> str:
        return device_key(self.options.device, self.options.gpu)

    def _device_lock(self, on_wait: Phase = _quiet) -> DeviceLock:
        """This evaluation's device, held across harness processes (device_lock)."""
        return DeviceLock(self.cache, self._device_key, on_wait)

    def _import_spec(self, path: Path, entry: builds.BuildEntry) -> BuildSpec:
        return BuildSpec(str(path.resolve()), str(entry.lock_path), str(entry.pch_lock_path))

    def _spawn_worker(self, spare: bool = False) -> Child:
        if self._closed:
            raise ChildDied("was not started: the evaluator is closed")
        self._spawned += 1
        log = self.logs / f"worker-{os.getpid()}-{self.options.gpu or 0}-{self._spawned}.log"
        return Child("candidate", log, env=self._start_env(spare), limits=self.limits, registry=self.registry)

    def _take_worker(self) -> Child:
        """The spare worker if one is ready, else a fresh one."""
        spare, self._spare = self._spare, None
        return spare if spare and spare.alive() else self._spawn_worker()

    def _stage(self, built: Built) -> None:
        """Start importing the candidate `run` will see next, while this one is checked.

        Its worker is paused while another candidate is timed, so it never
        competes with a measurement."""
        if built.failed or self._staged is not None:
            return
        worker = self._take_worker()
        try:
            self._send_spec(worker, built)
        except ChildDied:
            worker.kill()
            return
        self._staged = (built, worker)

    def _worker_for(self, built: Built) -> Child:
        staged, self._staged = self._staged, None
        if staged and staged[0] is built:
            return staged[1]
        if staged:  # staged for a candidate that did not come next
            staged[1].kill()
        worker = self._take_worker()
        try:
            self._send_spec(worker, built)
        except ChildDied:
            pass  # reported when its answer is awaited
        return worker

    def _send_spec(self, worker: Child, built: Built) -> None:
        built.result.worker_log = str(worker.log_path)
        spec = self._import_spec(built.path, built.entry)
        worker.send(to_dict(CandidateSpec(spec.candidate, spec.lock, spec.pch_lock, problem=self.problem.path,
                                          env=built.entry.env(), device=self.options.device,
                                          model_mode=self.options.model_mode, backward=self.backward,
                                          **self.seeds)))

    def _await_ready(self, worker: Child, result: EvalResult) -> None:
        try:
            ready = self._talk(worker, after(self.options.build_timeout, "the build timeout"),
                               "importing (building) the candidate", CandidateReady)[0]
            result.warnings.extend(ready.warnings)
            self._refuse_tampering(ready)
        except _Stop:
            worker.stop()
            raise

    def _talk(self, child: Child, deadline: Deadline, doing: str, kind: type[R], raw: bool = False):
        """The candidate worker's next reply, read as `kind`, and the message it came in."""
        try:
            message = child.recv(deadline.at, raw=raw)
        except ChildTimeout:
            raise _timeout(doing, deadline, child.log_path) from None
        except ChildDied as exc:
            raise _died(doing, exc.status, child) from None
        except ChildBrokeProtocol as exc:
            raise _broke_protocol(doing, str(exc)) from None
        reply = _read(kind, message)
        if reply.error:
            raise _child_error(reply, reply.phase or doing)
        _note_memory(self.memory.setdefault("candidate_worker", {}), reply)
        return reply, message

    def _oracle_says(self, deadline: Deadline, kind: type[R], doing: str) -> R:
        """The reference process's next reply, to the step it is `doing`. Its failure is the problem's,
        and ends the process, with a message naming the step, its limit and the time spent; running
        out of memory is the device's limit."""
        log = self.oracle.log_path
        try:
            reply = from_dict(kind, self.oracle.recv(deadline.at).header)
        except ChildTimeout:
            self._end_children()
            raise ProblemError(f"Problem file {self.problem.path}: the reference process was still {doing} "
                               f"after {deadline.limit:.0f} s ({deadline.basis}) and was stopped; see {log}.") from None
        except ChildDied as exc:
            self._end_children()
            raise ProblemError(f"Problem file {self.problem.path}: the reference process {exc.status} while "
                               f"{doing}, {deadline.spent:.1f} s into it; see {log}.") from None
        except ChildBrokeProtocol as exc:
            self._end_children()
            raise ProblemError(f"Problem file {self.problem.path}: while {doing}, the reference process wrote "
                               f"something that is not a message of the protocol ({exc}); see {log}.") from None
        if reply.error == "out_of_memory":
            self.oracle.stop()
            self.oracle = None
            first = str(reply.message).strip().splitlines()[:1]
            if kind in (OracleHolding, OracleReady):
                raise DoesNotFit(f"Problem file {self.problem.path}: the reference ran out of memory while it was "
                                 f"being loaded and linted ({''.join(first)}); the problem does not fit the "
                                 "device's free memory. Make get_inputs() smaller, or free the device.")
            raise _Stop(Verdict.RUNTIME_ERROR, f"The reference process ran out of GPU memory while {doing}, beside "
                        f"this candidate's process: {''.join(first)}", exception=reply.exception)
        if reply.error:
            self._end_children()
            raise ProblemError(f"Problem file {self.problem.path} could not be used: "
                               f"{reply.exception}: {reply.message}".strip())
        _note_memory(self.memory.setdefault("reference", {}), reply)
        return reply

    def _check(self, worker: Child, result: EvalResult, trials: Optional[int] = None,
               deadline: Optional[Deadline] = None) -> CheckResult:
        """Trials on fresh inputs, each compared by the oracle; the first failure stops with INCORRECT
        (and sets result.check)."""
        deadline = deadline or self._run_deadline()
        total = CheckResult(True)
        for trial in range(trials or self.options.trials):
            self.oracle.send(to_dict(Request(Command.MAKE_TRIAL)))
            made = self._oracle_says(deadline, TrialMade, f"drawing trial {trial + 1}")
            worker.send(to_dict(Request(Command.TRIAL, seed=made.seed)))
            reply, outputs = self._talk(worker, deadline, f"running trial {trial + 1}", TrialOutputs, raw=True)
            self._refuse_tampering(reply)
            if reply.checksum != made.checksum and self.oracle_info.reproducible:
                raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its process drew different inputs "
                            "from the reference's for the same seed, although the problem's inputs are "
                            "reproducible: it changed how inputs are drawn.")
            if reply.checksum != made.checksum:
                raise ProblemError(
                    f"Problem file {self.problem.path}: get_inputs() gave different inputs in two processes "
                    "for the same seed. Draw inputs from torch's random functions (torch.randn, torch.rand, "
                    "...) so a seed reproduces them.")
            self.oracle.forward(outputs, cmd=Command.COMPARE.value)
            check = self._oracle_says(deadline, Checked, f"comparing trial {trial + 1}").check
            check.trials = trial + 1
            changed = reply.inputs_changed
            if changed:
                check.passed = False
                check.reasons.insert(0, f"the candidate changed its input(s) {changed} in place")
            if reply.upstream_changed:
                check.passed = False
                check.reasons.insert(0, f"its backward changed the upstream gradient of output(s) "
                                        f"{reply.upstream_changed} in place")
            total.trials = trial + 1
            total.max_abs_error = max(total.max_abs_error, check.max_abs_error)
            total.max_rel_error = max(total.max_rel_error, check.max_rel_error)
            if not check.passed:
                check.failed_trial = trial + 1
                check.max_abs_error, check.max_rel_error = total.max_abs_error, total.max_rel_error
                result.check = check
                raise _Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} Trial {trial + 1}: "
                            + "; ".join(check.reasons) + ".")
        return total

    def _check_graph(self, worker: Child, result: EvalResult) -> None:
        """CUDA: forward captured in a CUDA graph on one trial's inputs, then replayed on another's
        (where a second copy of the inputs is small), both compared with the reference. What stops
        a capture, or a replay that does not match, is a note (serving stacks replay graphs), not
        a verdict. The worker then lets go of the graph, before the oracle needs the device again."""
        if self.options.device == "cpu" or self.backward:  # a graph of the forward alone: not what is checked
            return
        deadline = self._run_deadline()
        # A replay on new inputs holds a second copy of them beside the graph's own; where that copy
        # would be big, the graph is replayed on its captured inputs only, and the note says so.
        inputs = self.oracle_info.input_bytes
        replays = 2 if inputs <= max(GRAPH_SECOND_COPY_BYTES, in_process_need(self.oracle_info) // 10) else 1
        result.not_capturable = self._replay_graph(worker, replays, deadline) or None
        worker.send(to_dict(Request(Command.RELEASE)))
        self._talk(worker, deadline, "letting go of its CUDA graph", Reply)
        if replays == 1 and not result.not_capturable:
            result.warnings.append(f"the CUDA graph was replayed on its captured inputs only: a replay on new ones "
                                   f"would hold a second copy of the inputs ({_gb(inputs)})")

    def _replay_graph(self, worker: Child, replays: int, deadline: Deadline) -> str:
        """Why the candidate's graph cannot be captured or replayed, or "" when every replay matched."""
        for replay in range(replays):
            self.oracle.send(to_dict(Request(Command.MAKE_TRIAL)))
            made = self._oracle_says(deadline, TrialMade, "drawing inputs for the CUDA graph")
            worker.send(to_dict(Request(Command.GRAPH, seed=made.seed, last=replay == replays - 1)))
            reply, outputs = self._talk(worker, deadline, "replaying its CUDA graph", TrialOutputs, raw=True)
            self._refuse_tampering(reply)
            if reply.not_capturable or reply.checksum != made.checksum:
                return reply.not_capturable or "its inputs were not the trial's"
            self.oracle.forward(outputs, cmd=Command.COMPARE.value)
            check = self._oracle_says(deadline, Checked, "comparing the CUDA graph's outputs").check
            if not check.passed:
                return (f"replayed on {'new' if replay else 'its captured'} inputs, its outputs "
                        f"do not match the reference: {'; '.join(check.reasons)}")[:500]
        return ""

    def _check_shapes(self, worker: Child, result: EvalResult) -> None:
        """The candidate at the problem's other shapes, both models rebuilt afresh at each; the
        main shape comes back in the oracle at the end. A failure warns, or rejects under strict."""
        if self.options.shapes == "off" or not self.oracle_info.shapes:
            return
        deadline = self._run_deadline()
        trials = min(2, self.options.trials)
        try:
            for values in self.oracle_info.shapes:
                variant = ShapeVariant(values)
                result.shapes.append(variant)
                if not worker.alive():
                    variant.reason = "not checked: the candidate's process had stopped"
                    continue
                ready = self._oracle_at(values, deadline)
                if not ready.applied:
                    variant.reason = f"not checked: {ready.reason}"
                    continue
                try:
                    self._worker_at(worker, values, deadline)
                    check = self._check(worker, EvalResult(Verdict.CORRECT, ""), trials, deadline)
                    variant.passed, variant.reason = check.passed, ""
                except _Stop as stop:
                    variant.passed, variant.reason = False, stop.explanation.removeprefix(
                        Verdict.INCORRECT.sentence).strip().rstrip(".")[:800]
                except ChildDied:
                    variant.passed, variant.reason = False, "the candidate's process died"
        finally:
            self._oracle_back(deadline)
        failed = result.failed_shapes
        if not failed:
            return
        said = "; ".join(f"at {s.label}: {s.reason}" for s in failed)
        if self.options.shapes == "strict":
            raise _Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} It is correct at the main shape but not "
                        f"at {len(failed)} other shape(s) (--shapes strict): {said}"[:3000])
        result.warnings.append(f"incorrect at {len(failed)} of {len(result.shapes)} other shape(s), timed at the "
                               f"main shape only: {said}"[:3000])

    def _oracle_at(self, values: dict, deadline: Deadline) -> ShapeSet:
        """The reference rebuilt at a shape; where it cannot be, the oracle stays at the main shape."""
        self.oracle.send(to_dict(Request(Command.SHAPE, shape=values)))
        return self._oracle_says(deadline, ShapeSet, f"rebuilding the reference at {shape_label(values)}")

    def _oracle_back(self, deadline: Deadline) -> None:
        """The reference back at the main shape, for the next candidate."""
        if self.oracle and self.oracle.alive():
            self._oracle_at({}, Deadline(deadline.at + ORACLE_START_S, deadline.limit + ORACLE_START_S,
                                         f"{deadline.basis}, and the reference's start limit"))

    def _worker_at(self, worker: Child, values: dict, deadline: Deadline) -> None:
        """Both models in the candidate's worker rebuilt at a shape ({}: the main one)."""
        worker.send(to_dict(Request(Command.SHAPE, shape=values)))
        self._talk(worker, deadline, f"rebuilding ModelNew at {shape_label(values)}", ShapeSet)

    def _time_at_benchmark_shapes(self, worker: Child, result: EvalResult, notify: Phase) -> dict[str, Timing]:
        """Candidate and reference timed at each benchmark shape the problem declares, both models
        rebuilt there, each shape with its share of the time cap. The candidate is checked at a
        shape before it is timed there: a time for wrong outputs means nothing, so a failure there
        is its verdict. Returns the main shape's timings where it is one of them, else the first's."""
        shapes = self.oracle_info.benchmark_shapes
        shown: dict[str, Timing] = {}
        current: dict = {}  # the shape both processes are at
        deadline = self._run_deadline()
        try:
            for values in shapes:
                label = shape_label(values)
                deadline = self._run_deadline()
                said = len(result.warnings)
                try:
                    if values != current:
                        ready = self._oracle_at(values, deadline)
                        current = values if ready.applied else {}
                        if not ready.applied:
                            raise ProblemError(f"Problem file {self.problem.path}: get_benchmark_shapes() lists "
                                               f"{label}, where {ready.reason}. List only shapes the reference "
                                               "runs at.")
                        self._worker_at(worker, values, deadline)
                        if values:  # the main shape was checked first
                            self._check(worker, EvalResult(Verdict.CORRECT, ""), min(2, self.options.trials),
                                        deadline)
                    notify(f"timing at {label}")
                    with self._holding_device("timing", notify, result):
                        timings = self._time(worker, result, shares=len(shapes), shape=label)
                except _Stop as stop:  # wrong outputs here are its failure: their time would mean nothing
                    stop.explanation = f"{stop.explanation} (at benchmark shape {label})"
                    raise
                result.warnings[said:] = [f"at benchmark shape {label}: {w}" for w in result.warnings[said:]]
                cand, spread = timings["candidate"], self.placement.get(label) or 0.0
                result.benchmark_shapes.append(ShapeTiming(values, cand.median, cand.n,
                                                           speedups.baselines(timings, spread)))
                if not shown or not values:
                    shown = timings
        finally:
            if current:
                self._oracle_back(deadline)
        if current:  # the CUDA graph is checked at the main shape
            self._worker_at(worker, {}, deadline)
        return shown

    def _judge_speed(self, result: EvalResult) -> None:
        """Place the time against the hardware's limits; refuse the impossible."""
        cand = result.timings["candidate"]
        declared, peaks = self.oracle_info.roofline, self.oracle_info.peaks
        # what the problem declares is for its main shape: no floor for timings at other shapes
        if result.benchmark_shapes and all(s.values for s in result.benchmark_shapes):
            declared = {}
        line = roofline.assess(declared.get("bytes"), declared.get("flops"), peaks, cand.median)
        if declared:
            result.roofline = line
        if roofline.impossible(line, cand.median):
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its {cand.median:.4g} ms is below the "
                        f"physical floor of {line.floor_ms:.4g} ms: moving the problem's {line.bytes / 1e6:.0f} MB "
                        f"would take {line.achieved_gbs:.0f} GB/s, above the measured peak of "
                        f"{peaks.bandwidth_gbs:.0f} GB/s. The clock did not see all of its work.")
        if result.speedup and result.speedup > roofline.SUSPICIOUS_SPEEDUP:
            result.warnings.append(f"a speedup above {roofline.SUSPICIOUS_SPEEDUP:.0f}x is rare: check that the "
                                   "reference is not unusually slow and that the kernel does all the work")

    def _refuse_tampering(self, reply: Guarded) -> None:
        if reply.tampered:
            names = ", ".join(map(str, reply.tampered))
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} It replaced {names}, "
                        "which the harness uses to check or time it.", tampered=reply.tampered)
        if reply.modes:
            names = ", ".join(map(str, reply.modes))
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} It left a torch function or dispatch "
                        f"mode active ({names}), which intercepts every operation, the reference's too.",
                        modes=reply.modes)
        if reply.precision:
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} It lowered float32 precision "
                        f"({'; '.join(reply.precision)}): TF32 rounds every product, and it would apply to "
                        "the reference too.", precision=reply.precision)
        if reply.l2_persistence:
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} It left persisting L2 set "
                        f"({'; '.join(reply.l2_persistence)}): data kept in L2 that way outlives the "
                        "cache flush before each timed call.", l2_persistence=reply.l2_persistence)
        if reply.threads:
            names = ", ".join(map(str, reply.threads))
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} It left background thread(s) "
                        f"running ({names}): work finished after forward returns escapes the check and "
                        "the clock.", threads=reply.threads)

    def _time(self, worker: Child, result: EvalResult, shares: int = 1, shape: str = "") -> dict[str, Timing]:
        """Candidate and reference beside each other in the worker, then the reference alone, each
        with `shares`' part of the time cap. A reference much slower beside the candidate is timed
        again, both ways, before the candidate is refused: load from elsewhere comes and goes, a
        candidate that slows the reference down does so every time. The first time at a `shape`, the
        reference's twins are timed alone beside it too (placement_spread)."""
        timings, alone = self._time_once(worker, result, shares, shape)
        for _ in range(SLOWDOWN_RETIMES):
            if not any(self._slowed_down(timings[key], alone[key]) for key in _BESIDE_AND_ALONE if key in alone):
                break
            if result.retimed_for_slowdown is None:
                result.retimed_for_slowdown = Retimed(timings["reference"].median, alone["reference"].median)
            # Under the same conditions: this process's builds stopped, and the reference alone timed
            # just before the candidate's timing as well as just after, the slower of the two counting,
            # so load that comes and goes cannot fall on the candidate's side alone.
            with _builds_paused():
                before = self._reference_alone(shares)
                timings, alone = self._time_once(worker, result, shares, shape)
            alone.update({key: max(before[key], alone[key], key=lambda t: t.median)
                          for key in _BESIDE_AND_ALONE if key in before and key in alone})
        for key in _BESIDE_AND_ALONE:
            if key in alone:
                self._compare_reference(timings[key], alone.pop(key), result)
        return {**timings, **alone}

    def _time_once(self, worker: Child, result: EvalResult,
                   shares: int, shape: str) -> tuple[dict[str, Timing], dict[str, Timing]]:
        o = self.options
        rule = Rule(o.rel_se_target(), o.time_cap / shares, o.min_samples)
        numerics = self.oracle_info.numerics_differ
        if self.oracle_info.parameter_bytes >= PARK_BYTES:  # the reference's weights leave the device to the worker
            self.oracle.send(to_dict(Request(Command.PARK)))
            self._oracle_says(self._run_deadline(), Reply, "moving the reference's parameters to the host")
        worker.send(to_dict(Request(Command.TIME, rule=rule, default_numerics=numerics)))
        reply, message = self._talk(worker, self._timing_deadline(rule), "being timed", Timed, raw=True)
        self._refuse_tampering(reply)
        timings = reply.timings
        cand = timings.get("candidate")
        if cand is None or "reference" not in timings or len(reply.timed) != cand.n + len(cand.sync_samples) \
                or cand.median <= 0:
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its timing reply does not hold the "
                        "outputs of the calls it claims to have timed: the reply was forged.")
        if speedups.hides_work(timings):
            # Queued events see the current stream only; what ran elsewhere counts, so every
            # figure beside the candidate is read from the synchronous samples instead.
            result.hidden_work_ms = speedups.hidden_work_ms(timings)
            seen = (f"its calls took {cand.sync_median:.4g} ms with the whole device synchronized before the clock "
                    f"stopped, against {cand.median:.4g} ms queued on the caller's stream: {result.hidden_work_ms:.3g} "
                    "ms more than the protocol adds to the reference")
            result.warnings.append(f"{seen}, as work the caller's stream does not wait for (another stream or "
                                   "thread) reads; it was timed synchronously, every stream counted")
            timings = {name: speedups.synchronous(t) for name, t in timings.items()}
        self.oracle.forward(message, cmd=Command.VERIFY_TIMED.value)
        check = self._oracle_says(self._run_deadline(), Checked, "re-checking the timed outputs").check
        result.timed_calls_checked = check.trials
        if not check.passed:
            # Trials synchronize the device before reading outputs; timed calls follow one another
            # on the caller's stream, where unfinished work elsewhere shows as wrong outputs.
            # Say what was measured; name a stream only where the synchronous samples saw hidden work.
            why = (f"Also, {seen}: work left running on another stream or thread, which the caller's stream does "
                   "not wait for, would leave calls queued after it reading outputs not yet written"
                   if result.hidden_work_ms
                   else "No work was seen off the caller's stream: the outputs of its timed calls differ from those "
                        "of its check trials, as call counting, cached outputs or gradients, or skipped work "
                        "would make them")
            raise _Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} It passed the check trials, but "
                        f"while being timed {'; '.join(check.reasons)}. {why}.", timed_check=to_dict(check))
        measure = shape not in self.placement
        budget = placement_budget(self.oracle_info) if measure else 0
        rule = self._alone_rule(shares)
        self.oracle.send(to_dict(Request(Command.TIME_REFERENCE, compile_baseline=o.compile_baseline,
                                         rule=rule, default_numerics=numerics, placement_budget=budget)))
        alone = self._oracle_says(self._timing_deadline(rule), ReferenceTimed, "timing the reference alone").timings
        twins = [alone.pop(key) for key in [key for key in alone if key.startswith("placement_")]]
        if measure:
            # no twins of a model that holds tensors: too big to copy twice, the spread is not known
            unmeasured = not twins and self.oracle_info.parameter_bytes
            self.placement[shape] = None if unmeasured else speedups.placement_spread(alone["reference"], twins)
            if unmeasured:
                result.warnings.append(
                    f"the reference's parameters ({_gb(self.oracle_info.parameter_bytes)}) are too big to copy twice "
                    "beside it, so what their placement alone does to its time was not measured; the interval "
                    "does not span it")
        if self.placement[shape] is not None:
            result.placement_spread = max(result.placement_spread or 0.0, self.placement[shape])
        return timings, alone

    def _reference_alone(self, shares: int) -> dict[str, Timing]:
        """The reference alone, at each numerics setting the candidate's timing has, and nothing else."""
        rule = self._alone_rule(shares)
        self.oracle.send(to_dict(Request(Command.TIME_REFERENCE, rule=rule,
                                         default_numerics=self.oracle_info.numerics_differ)))
        return self._oracle_says(self._timing_deadline(rule), ReferenceTimed, "timing the reference alone").timings

    def _alone_rule(self, shares: int = 1) -> Rule:
        o = self.options
        return Rule(o.rel_se_target(), min(o.time_cap, 3.0) / shares, o.min_samples)

    def _run_deadline(self) -> Deadline:
        """A step of a few calls (trials, a shape's rebuild, the re-check): the run timeout bounds it."""
        return after(self.options.run_timeout, "the run timeout")

    def _timing_deadline(self, rule: Rule) -> Deadline:
        """A timing step: the sampling its time cap allows, then a run timeout, which bounds a call
        (the cap is looked at between batches of calls), and torch.compile's compile where asked."""
        o = self.options
        extra = ORACLE_START_S if o.compile_baseline else 0.0
        return after(rule.time_cap + o.run_timeout + extra,
                     f"its time cap's {rule.time_cap:.3g} s of sampling, then the run timeout of {o.run_timeout:.0f} s"
                     + (" and the reference's start limit for torch.compile" if extra else ""))

    def time_reference(self) -> Timing:
        """The reference alone under the faster numerics setting, before any candidate: its time for
        a run's first prompt and the ceiling a run can reach. Holds the device's timing lock."""
        self.start_oracle()
        numerics = self.oracle_info.numerics_differ
        with self._device_lock():
            rule = self._alone_rule()
            self.oracle.send(to_dict(Request(Command.TIME_REFERENCE, rule=rule, default_numerics=numerics)))
            timings = self._oracle_says(self._timing_deadline(rule), ReferenceTimed,
                                        "timing the reference before the first candidate").timings
        # the headline's baseline: the faster numerics setting (speedups.ranked)
        return min((timings[key] for key in _BESIDE_AND_ALONE if key in timings), key=lambda t: t.median)

    def _slowed_down(self, beside: Timing, alone: Timing) -> bool:
        """Past the refusal threshold, both as a ratio and in time."""
        floor = REFERENCE_SLOWDOWN_MIN_MS["cpu" if self.options.device == "cpu" else "cuda"]
        return _slowdown(beside, alone) > REFERENCE_SLOWDOWN_REJECT and beside.median - alone.median > floor

    def _compare_reference(self, beside: Timing, alone: Timing, result: EvalResult) -> None:
        """The reference timed beside the candidate must run about as fast as alone."""
        result.reference_alone_ms = alone.median
        ratio = _slowdown(beside, alone)
        if self._slowed_down(beside, alone):
            raise _Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} The reference ran {ratio:.1f}x slower "
                        f"beside the candidate ({beside.median:.4g} ms) than alone ({alone.median:.4g} ms): "
                        "the candidate slowed the reference down to inflate its speedup.")
        if ratio > REFERENCE_SLOWDOWN_WARN:
            result.warnings.append(f"the reference ran {ratio:.2f}x slower beside the candidate than alone "
                                   f"({beside.median:.4g} ms vs {alone.median:.4g} ms)")


def _note_memory(peaks: dict[str, int], reply: Reply) -> None:
    for key, value in (reply.memory or {}).items():
        if isinstance(value, int):
            peaks[key] = max(peaks.get(key, 0), value)


def _slowdown(beside: Timing, alone: Timing) -> float:
    """How many times slower the reference ran beside the candidate than alone."""
    return beside.median / alone.median if alone.median > 0 else 1.0


def evaluate(problem: str | Path, candidate: str | Path, options: Optional[EvalOptions] = None,
             on_phase: Optional[Phase] = None) -> EvalResult:
    """Evaluate one candidate; raises ProblemError for a bad problem file."""
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        return evaluator.evaluate(candidate, on_phase)
