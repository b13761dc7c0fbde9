"""The correctness phases: trials on fresh inputs (an audit's on other input distributions too), the CUDA
graph's capture and replay, and the problem's other shapes. Each trial is one round trip: the reference
process draws inputs from a seed, the candidate's worker runs on the same seed's inputs, and the reference
compares."""
from __future__ import annotations

import random
from typing import Optional

from ...files import new_seed
from ...integrity.distributions import DISTRIBUTIONS
from ...problem import ProblemError
from ...results import CheckResult, EvalResult, ShapeVariant, to_dict
from ..children import Children
from ..findings import (Finding, IncorrectAtShapes, IncorrectOnInputs, InputsDiffer, LowerPrecision, ReusedOutputs,
                        StreamOrder, TrialFailed)
from ..processes.child import Child, ChildDied
from ..processes.footprint import footprint, gb, in_process_need
from ..processes.protocol import Checked, Command, Reply, Request, TrialMade, TrialOutputs
from ..verdicts import Deadline, refuse_on_guards, shape_reason

# inputs up to this size get the CUDA graph's replay on new inputs (a second copy of them)
GRAPH_SECOND_COPY_BYTES = 1 << 30


# Where one evaluation's most memory (footprint) is at most this share of what the device had free,
# the reference draws and runs a trial while the worker runs it too: each holds its own input draw
# and outputs at once, which the footprint already counts.
SIDE_BY_SIDE_SHARE = 0.5


def side_by_side(children: Children) -> bool:
    """Whether the two processes run each trial at once (SIDE_BY_SIDE_SHARE); else the reference
    gives the device back before the worker draws."""
    info = children.reference_info
    return bool(info.available_bytes) and footprint(info) <= SIDE_BY_SIDE_SHARE * info.available_bytes


def lint_in_trials(children: Children) -> bool:
    """Whether the main check's first trials are the problem lint's draws too (integrity/lint.py's
    Draws), so that the lint between the check and the timing needs no draws of its own (0.12 s a
    problem, on the path from one timing to the next in a sweep). The reference process then keeps
    the first trial's outputs until the third: only where that copy fits beside the rest as the
    trials side by side do (SIDE_BY_SIDE_SHARE), and not under --backward, whose trials' outputs are
    a training step's."""
    info = children.reference_info
    return (children.lint_due and not children.backward and bool(info.available_bytes)
            and footprint(info) + info.output_bytes <= SIDE_BY_SIDE_SHARE * info.available_bytes)


def _round_trip(children: Children, worker: Child, deadline: Deadline, command: Command, drawing: str,
                running: str, lint: bool = False, exact: bool = False, distribution: str = "",
                **request) -> tuple[TrialMade, TrialOutputs, object]:
    """The reference draws a trial (with `lint`, one of the lint's draws too), the worker runs
    `command` on its seed: what each said, and the worker's outputs as they came (raw, for the
    reference to compare). Side by side, the harness draws the seed and both start at once, each
    keeping what it frees cached for the next trial (the footprint counts both peaks at once, and
    memory given back and taken again cost 5-10 ms a step on multi-GB outputs, more while the other
    process runs); the reference's reply is read first either way, so none is left unread when the
    worker's fails."""
    if side_by_side(children):
        seed = new_seed()
        children.reference.send(to_dict(Request(Command.MAKE_TRIAL, seed=seed, lint=lint, exact=exact,
                                                keep_cache=True, distribution=distribution)))
        worker.send(to_dict(Request(command, seed=seed, keep_cache=True, distribution=distribution, **request)))
        made = children.reference_says(deadline, TrialMade, drawing)
    else:
        children.reference.send(to_dict(Request(Command.MAKE_TRIAL, lint=lint, exact=exact,
                                                distribution=distribution)))
        made = children.reference_says(deadline, TrialMade, drawing)
        worker.send(to_dict(Request(command, seed=made.seed, distribution=distribution, **request)))
    reply, outputs = children.talk(worker, deadline, running, TrialOutputs, raw=True)
    refuse_on_guards(reply)
    return made, reply, outputs


def _compared(children: Children, outputs, deadline: Deadline, doing: str, more: bool) -> Checked:
    """The reference's comparison of a trial's `outputs`; with `more` trials to come side by side, what it
    frees stays cached for them (_round_trip), else it goes back to the device."""
    children.reference.forward(outputs, cmd=Command.COMPARE.value, keep_cache=more and side_by_side(children))
    return children.reference_says(deadline, Checked, doing)


class Unusable(Exception):
    """A trial at another distribution that cannot judge the candidate there; the message says why."""


def check(children: Children, worker: Child, trials: int, warnings: list[str], deadline: Optional[Deadline] = None,
          lint: bool = False, exact: bool = False, distribution: str = "") -> CheckResult:
    """Trials on fresh inputs, each compared by the reference process; the first failure is a TrialFailed.
    On a GPU every trial runs under the stream-order probe (integrity/stream_order.py): a trial it makes
    wrong is run again on new inputs without it, and where that one is right the verdict says the
    candidate's work does not wait for the caller's stream (StreamOrder). With `exact`, one trial drawn
    at random is the numerics check's too (integrity/precision.py, LowerPrecision). A trial's outputs
    that share memory with the last trial's, which the worker still holds, end it (ReusedOutputs).
    `lint`: its first trials are the problem lint's draws too (lint_in_trials). `distribution`: each trial's
    inputs moved there (check_distributions), an Unusable where the reference cannot judge it. A trial whose
    outputs the reference read other than the worker summed them runs again once, its outputs sent as bytes,
    not CUDA IPC handles: a transfer lost on the way is the harness's fault, not the candidate's verdict, and
    `warnings` says so."""
    deadline = deadline or children.run_deadline()
    total, trial = CheckResult(True), 0
    probe = children.options.device != "cpu"
    exact = exact and not children.options.weakened("precision")
    numerics = random.SystemRandom().randrange(trials) if exact and trials else -1
    every_exact = children.options.scrutiny.every_trial_exact  # an audit's: float64 on every trial
    while trial < trials:
        made, reply, outputs = _round_trip(children, worker, deadline, Command.TRIAL, f"drawing trial {trial + 1}",
                                           f"running trial {trial + 1}", lint=lint,
                                           exact=trial == numerics or (exact and every_exact),
                                           distribution=distribution, by_host=bool(total.read_again), probe=probe)
        if made.unusable:
            raise Unusable(made.unusable)
        if reply.checksum != made.checksum and children.reference_info.reproducible:
            raise InputsDiffer()
        if reply.checksum != made.checksum:
            raise ProblemError(
                f"Problem file {children.problem.path}: get_inputs() gave different inputs in two processes "
                "for the same seed. Draw inputs from torch's random functions (torch.randn, torch.rand, "
                "...) so a seed reproduces them.")
        checked = _compared(children, outputs, deadline, f"comparing trial {trial + 1}", more=trial + 1 < trials)
        if checked.read_differs and not total.read_again and not reply.not_ready:
            total.read_again = 1
            warnings.append(f"trial {trial + 1}'s outputs reached the reference process other than the candidate's "
                            "process summed them; the trial ran again on new inputs, and the check's outputs went "
                            "through host memory from then on")
            continue
        result, trial = checked.check, trial + 1
        result.trials = trial
        if reply.not_ready:
            raise StreamOrder(trial, waits=False)
        if reply.reused:
            raise ReusedOutputs(1, 0)
        changed = reply.inputs_changed
        if changed:
            result.passed = False
            result.reasons.insert(0, f"the candidate changed its input(s) {changed} in place")
        if reply.upstream_changed:
            result.passed = False
            result.reasons.insert(0, f"its backward changed the upstream gradient of output(s) "
                                     f"{reply.upstream_changed} in place")
        total.trials = trial
        total.max_abs_error = max(total.max_abs_error, result.max_abs_error)
        total.max_rel_error = max(total.max_rel_error, result.max_rel_error)
        total.precision = checked.precision or total.precision
        if not result.passed:
            if reply.probed and not changed and _right_unprobed(children, worker, deadline, trial):
                raise StreamOrder(trial, waits=True)
            result.failed_trial, result.read_again = trial, total.read_again
            result.max_abs_error, result.max_rel_error = total.max_abs_error, total.max_rel_error
            raise TrialFailed(trial, result)
        # The precision ratio decides on the problem's own inputs: on moved ones, mathematically equal formulas
        # part by hundreds of eager's tiny relative error (2*sigmoid(2x)-1 for tanh at x ~ 1e-3, 760x), and the
        # comparison with float64 there, eager's error allowed, is what judges
        if checked.shortfall and not distribution:
            worst = next(f for f in checked.precision if f.get("output") == checked.shortfall)
            found = LowerPrecision(checked.shortfall, worst["candidate"], worst["eager"], worst["ratio"], worst["limit"])
            if not _tolerance_chosen(children):
                raise found
            warnings.append(f"its {found.output} is {found.ratio:.0f}x further from the reference computed in float64 "
                            f"than eager float32 is (relative RMS error {found.candidate:.3g} against "
                            f"{found.eager:.3g}): lower precision, which the tolerance chosen allows")
    return total


def check_distributions(children: Children, worker: Child, result: EvalResult) -> None:
    """An audit's: a trial on the inputs moved to each other distribution (integrity/distributions.py), judged
    against float64 with eager's own error there allowed; the first that fails is the verdict
    (IncorrectOnInputs). Which were checked, and why any was skipped, goes in the result's details."""
    if children.backward:
        result.details["other_inputs"] = {"skipped": "not under --backward: a training step's gradients"}
        return
    deadline, said = children.run_deadline(), {}
    result.details["other_inputs"] = said
    for distribution in DISTRIBUTIONS:
        try:
            check(children, worker, 1, result.warnings, deadline, exact=True, distribution=distribution.name)
        except Unusable as exc:
            said[distribution.name] = f"skipped: {exc}"
            continue
        except TrialFailed as found:  # what else a trial finds is no distribution's doing
            said[distribution.name] = "failed"
            raise IncorrectOnInputs(distribution.says, shape_reason(found)) from None
        said[distribution.name] = "passed"


def _tolerance_chosen(children: Children) -> bool:
    """Whether a tolerance was chosen for this problem (--atol/--rtol, or the problem's ATOL/RTOL): one that
    lets lower precision through is then a choice, and the numerics check warns instead of ending it."""
    o, p = children.options, children.problem
    return any(value is not None for value in (o.atol, o.rtol, p.atol, p.rtol))


def _right_unprobed(children: Children, worker: Child, deadline: Deadline, trial: int) -> bool:
    """Whether the candidate is right on a new trial's inputs made without the stream-order probe: the
    probed trial's failure is then the probe's finding."""
    _, reply, outputs = _round_trip(children, worker, deadline, Command.TRIAL, f"drawing trial {trial} again",
                                    f"running trial {trial} again without the stream-order probe")
    return _compared(children, outputs, deadline, f"comparing trial {trial} again", more=False).check.passed \
        and not reply.inputs_changed


def check_graph(children: Children, worker: Child, result: EvalResult) -> None:
    """CUDA: forward captured in a CUDA graph on one trial's inputs, then replayed on another's
    (where a second copy of the inputs is small), both compared with the reference. What stops
    a capture, or a replay that does not match, is a note (serving stacks replay graphs), not
    a verdict. The worker then lets go of the graph, before the reference process needs the device again."""
    if children.options.device == "cpu" or children.backward:  # a graph of the forward alone: not what is checked
        return
    deadline = children.run_deadline()
    # A replay on new inputs holds a second copy of them beside the graph's own; where that copy
    # would be big, the graph is replayed on its captured inputs only, and the note says so.
    inputs = children.reference_info.input_bytes
    replays = 2 if inputs <= max(GRAPH_SECOND_COPY_BYTES, in_process_need(children.reference_info) // 10) else 1
    result.not_capturable = _replay_graph(children, worker, replays, deadline) or None
    worker.send(to_dict(Request(Command.RELEASE)))
    children.talk(worker, deadline, "letting go of its CUDA graph", Reply)
    if replays == 1 and not result.not_capturable:
        result.warnings.append(f"the CUDA graph was replayed on its captured inputs only: a replay on new ones "
                               f"would hold a second copy of the inputs ({gb(inputs)})")


def _replay_graph(children: Children, worker: Child, replays: int, deadline: Deadline) -> str:
    """Why the candidate's graph cannot be captured or replayed, or "" when every replay matched."""
    for replay in range(replays):
        made, reply, outputs = _round_trip(children, worker, deadline, Command.GRAPH,
                                           "drawing inputs for the CUDA graph", "replaying its CUDA graph",
                                           last=replay == replays - 1)
        if reply.not_capturable or reply.checksum != made.checksum:
            return reply.not_capturable or "its inputs were not the trial's"
        compared = _compared(children, outputs, deadline, "comparing the CUDA graph's outputs",
                             more=replay < replays - 1).check
        if not compared.passed:
            return (f"replayed on {'new' if replay else 'its captured'} inputs, its outputs "
                    f"do not match the reference: {'; '.join(compared.reasons)}")[:500]
    return ""


def check_shapes(children: Children, worker: Child, result: EvalResult) -> None:
    """The candidate at the problem's other shapes, both models rebuilt afresh at each; the
    main shape comes back in the reference process at the end. A failure warns, or rejects under strict:
    one trial a shape where it only warns (a size written into the kernel fails on any inputs), two
    where it is the verdict, as at a benchmark shape."""
    options = children.options
    if options.shapes == "off" or not children.reference_info.shapes:
        return
    deadline = children.run_deadline()
    trials = min(2 if options.shapes == "strict" else 1, options.trials)
    try:
        for values in children.reference_info.shapes:
            variant = ShapeVariant(values)
            result.shapes.append(variant)
            if not worker.alive():
                variant.reason = "not checked: the candidate's process had stopped"
                continue
            ready = children.reference_at(values, deadline)
            if not ready.applied:
                variant.reason = f"not checked: {ready.reason}"
                continue
            try:
                children.worker_at(worker, values, deadline)
                variant.passed, variant.reason = check(children, worker, trials, result.warnings, deadline).passed, ""
            except Finding as found:
                variant.passed, variant.reason = False, shape_reason(found)
            except ChildDied:
                variant.passed, variant.reason = False, "the candidate's process died"
    finally:
        children.reference_back(deadline)
    failed = result.failed_shapes
    if not failed:
        return
    said = "; ".join(f"at {s.label}: {s.reason}" for s in failed)
    if options.shapes == "strict":
        raise IncorrectAtShapes(len(failed), said)
    result.warnings.append(f"incorrect at {len(failed)} of {len(result.shapes)} other shape(s), timed at the "
                           f"main shape only: {said}"[:3000])
