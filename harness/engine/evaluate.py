"""One evaluation: build, check, time, and a verdict.

The harness process only orchestrates. It starts the reference process once per
problem and device, a build child per uncached candidate, and a fresh candidate worker per
evaluation; it relays trial inputs and candidate outputs between them as raw bytes and turns
every way a child can end into a verdict. The phases, in order (phases.Phase), each in a room
of its own:

    build    building/builder.py   the static check and the compile, in a build child
    start    children.py           the reference process ready, the candidate's worker importing its build
    check    checking/trials.py    trials on fresh inputs, compared by the reference process (stream order probed,
                                   one trial's numerics against float64)
    time     timing/measure.py     candidate and reference in turns, each in its own process; the reference alone
    shapes   checking/trials.py    the CUDA graph's replay, then the problem's other shapes
    (judge)  judge.py              speedups against each baseline, the hardware's floor, the verdict
    profile  profiling/profile.py  where asked, one forward of a correct candidate under the profiler

A phase that ends the evaluation early raises what it found (findings.py); verdicts.judged writes
the verdict and its sentence into the result.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Optional

from ..device import require_cuda
from ..errors import HarnessError
from ..problem import Problem, load_problem
from ..profiles import Profile
from ..results import EvalResult, Timing
from .building.builder import Built, Builder
from .checking import trials
from .children import Children
from .findings import Finding
from .judge import judge
from .options import EvalOptions
from .phases import Notify, Phase, quiet
from .profiling.profile import Profiler, ProfileRequest
from .timing.measure import Measure
from .verdicts import judged


class Evaluator:
    """Evaluates candidates for one problem on one device, keeping the reference process."""

    def __init__(self, problem: str | Path | Problem, options: Optional[EvalOptions] = None,
                 keep_spare: bool = True):
        self.options = options or EvalOptions()
        require_cuda(self.options.device)  # before the problem is blamed for a missing GPU
        self.problem = problem if isinstance(problem, Problem) else load_problem(problem)
        self.builder = Builder(self.problem, self.options)
        self.backward = self.builder.backward
        self.children = Children(self.problem, self.options, self.backward, keep_spare)
        self.measure = Measure(self.children)
        self.profiler = Profiler(self.options.device) if self.options.profile else None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.profiler:
            self.profiler.stop()
        self.children.close()

    # the reference process and what it found, for the pool, the sweep and the loop
    @property
    def reference(self):
        return self.children.reference

    @property
    def reference_info(self):
        return self.children.reference_info

    @property
    def environment(self):
        return self.children.environment

    @property
    def problem_warnings(self) -> list[str]:
        return self.children.problem_warnings

    @property
    def placement(self) -> dict[str, dict[str, Optional[float]]]:
        """The reference's placement spread by shape, then clock (Measure.placement)."""
        return self.measure.placement

    def start_reference(self, hold_device: bool = False) -> None:
        self.children.start_reference(hold_device)

    def spawn(self) -> None:
        self.children.spawn()

    def prepare(self) -> None:
        self.children.prepare()

    def time_reference(self) -> Timing:
        return self.measure.reference()

    def time_reference_clocks(self) -> dict[str, Timing]:
        """The reference alone on every clock the device has (Measure.reference_clocks)."""
        return self.measure.reference_clocks()

    def evaluate(self, candidate: str | Path, on_phase: Optional[Notify] = None) -> EvalResult:
        """Build, check and time one candidate."""
        return self.run(self.build(candidate, on_phase), on_phase)

    def build(self, candidate: str | Path, on_phase: Optional[Notify] = None) -> Built:
        """The build phase alone: needs CPU cores only, so a pool runs many at once."""
        return self.builder.build(candidate, on_phase)

    def run(self, built: Built, on_phase: Optional[Notify] = None, upcoming: Optional[Built] = None) -> EvalResult:
        """The phases after the build, in order, each announced and timed; `upcoming`, the
        candidate that will run next, starts importing while this one is checked."""
        result = built.result
        if built.failed:
            return result
        notify = on_phase or quiet
        children = self.children
        children.waits = {}  # this candidate's from here (a prepared reference's load was before it)
        worker = children.worker_for(built)  # imports while the reference process comes up
        if upcoming is not None:  # after this one has its worker: the warm spare goes to the candidate due first
            children.stage(upcoming)
        children.keep_a_spare()  # imports torch during this evaluation, for the one after upcoming

        def start() -> None:
            children.start_reference()
            result.environment = children.environment
            result.warnings.extend(children.problem_warnings)
            result.grad_allowance = dict(children.reference_info.grad_allowance)
            result.problem_degenerate = list(children.reference_info.degenerate)
            children.await_ready(worker, result)

        def check() -> None:
            result.check = trials.check(children, worker, self.options.trials, result.warnings,
                                        lint=trials.lint_in_trials(children), exact=True)
            if self.options.scrutiny.other_inputs:
                trials.check_distributions(children, worker, result)

        def time_it() -> None:
            self.measure.candidate(worker, result, notify)

        def shapes() -> None:
            # after timing: a candidate that breaks at another shape may leave a CUDA context unusable
            trials.check_graph(children, worker, result)
            trials.check_shapes(children, worker, result)

        plan: list[tuple[Phase, Callable[[], None]]] = [
            (Phase.START, start), (Phase.CHECK, check), (Phase.TIME, time_it), (Phase.SHAPES, shapes)]
        try:
            for phase, step in plan:
                # the other shapes hold the device against this process's timings, announced or not: a sweep
                # starts the next problem once they are announced, its checks beside them
                with children.untimed() if phase is Phase.SHAPES else nullcontext():
                    self._phase(phase, step, result, notify)
                if phase is Phase.CHECK:
                    # The problem lint (once a problem, in no phase) before the timing: in a sweep the timing
                    # waits here for the next problem's load anyway, while a lint after the verdict held up
                    # the next problem's timing. Its draws were the check's first trials, where they fit.
                    result.warnings.extend(children.lint_problem())
            judge(result, children.reference_info, self.backward)
            if self.profiler:
                worker.stop()  # its GPU memory and context are not the profiled forward's
                self._phase(Phase.PROFILE, lambda: self._profile(built, result, notify), result, notify)
        except Finding as found:
            judged(found).fill(result)
        finally:
            children.done_with(worker, result)
            result.seconds = time.monotonic() - built.started
            result.details["waits_s"] = {step: round(s, 3) for step, s in children.waits.items()}
        result.warnings.extend(children.lint_problem())  # where the evaluation ended before its timing
        return result

    @staticmethod
    def _phase(phase: Phase, step: Callable[[], None], result: EvalResult, notify: Notify) -> None:
        """One phase: announced as it begins, its seconds recorded when it ends (not when it stops
        the evaluation: a phase that ends it is the verdict's, not a step taken)."""
        if phase.doing:
            notify(phase.doing)
        started = time.monotonic()
        step()
        result.phase_seconds[phase.value] = time.monotonic() - started

    def _profile(self, built: Built, result: EvalResult, notify: Notify) -> None:
        """One forward of a correct candidate under the profiler, in a process of its own. A
        profile that fails or runs past its limit is the profile's note, not the candidate's verdict."""
        request = ProfileRequest(self.problem.path, str(built.path), self.options.device, self.options.profile_kernel,
                                 time_limit_s=self.options.profile_time_limit,
                                 env=self.options.child_env(built.entry), **self.children.seeds)
        started = time.monotonic()
        with self.children.holding_device(Phase.PROFILE.doing, notify, result):
            try:
                result.profile = self.profiler(request)
            except (HarnessError, OSError, ValueError) as exc:
                result.profile = Profile("none", note=f"no profile: {exc}", seconds=time.monotonic() - started)


def evaluate(problem: str | Path, candidate: str | Path, options: Optional[EvalOptions] = None,
             on_phase: Optional[Notify] = None) -> EvalResult:
    """Evaluate one candidate; raises ProblemError for a bad problem file."""
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        return evaluator.evaluate(candidate, on_phase)
