"""The reference role: the reference process of one problem on one device.

It builds the reference (reference_load.py), draws trial inputs from fresh seeds, keeps the
reference outputs, compares what the candidate returned, and times the reference: alone, and
beside the candidate, taking turns with the candidate's worker batch by batch (workers/party.py).
It never runs candidate code, so neither the reference's outputs nor the reference whose time
divides the candidate's are within the candidate's reach. After the load it serves the harness's
commands, one handler each (HANDLERS).
"""
from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Callable, Optional

import torch

from ...files import new_seed
from ...integrity import distributions, lint, precision
from ...integrity.digest import checksum
from ...integrity.guards import at_default_numerics
from ...integrity.recheck import TimedOutputs, verify_timed
from ...problem import tolerance
from ...results import CheckResult, as_list, from_dict, to_dict
from ..checking import compare
from ..processes import channel
from ..processes.footprint import TWIN_PADS_MIB, twin_count
from ..processes.protocol import (Checked, Command, Linted, PartyReady, ReferenceSpec, ReferenceTimed, Reply,
                                  Request, ShapeSet, TrialMade)
from ..timing import clock
from . import backward, party, warm
from .common import Laps, SameTensors, check_inputs, error_message, inputs_from_seed, settle, sync
from .memory import free_cache, held_bytes, memory_available, memory_use, tensor_bytes
from .reference_load import (ReferenceProcess, failure_kind, build_reference, check_outputs, describe, holding_device,
                             load)


def twins(reference: torch.nn.Module, device: torch.device, budget: int) -> list[torch.nn.Module]:
    """Copies of the reference whose parameters and buffers sit at other addresses, to measure
    what placement alone does to its time; none where it holds no tensors, cannot be copied, or
    fewer than MIN_TWINS copies fit in `budget` bytes (footprint.twin_count)."""
    count = twin_count(held_bytes(reference), budget)
    if not count:
        return []
    pads, found = [], []
    try:
        for mib in TWIN_PADS_MIB[:count]:
            pads.append(torch.empty(mib << 20, dtype=torch.uint8, device=device))
            found.append(copy.deepcopy(reference))
    except Exception:  # noqa: BLE001 - a model that cannot be copied goes without the measure
        return []
    return found


def reference_role(conn, header: dict) -> None:
    spec = from_dict(ReferenceSpec, header)
    device = torch.device(spec.device)
    settle(device)
    laps = Laps(device)  # where the load's seconds go, for a sweep's records
    if device.type == "cuda":  # the context: seconds of driver work, no kernel, so before the lock
        torch.empty(1, device=device)
    laps.lap("context")
    # Loading runs the reference (its lint too): a sweep's next problem must not do that beside the
    # current one's timing on this device, so it waits for the device here, its imports done.
    with holding_device(conn, spec):
        laps.lap("device_wait")
        try:
            ref, info = load(conn, spec, device, laps)
        except BaseException as exc:  # noqa: BLE001
            channel.send(conn, error_message(failure_kind(exc), exc))
            return
        describe(ref, info, laps)
    info.load_seconds = {**laps.laps, **({"spare_first_calls": round(warm.first_calls_s, 3)}
                                         if warm.first_calls_s is not None else {})}
    channel.send(conn, to_dict(info))
    _serve(ref)


# --- the commands: each handler answers one, and says whether the process goes on ---------------

def make_trial(ref: ReferenceProcess, message: channel.Message) -> bool:
    """A trial drawn from a fresh seed (the harness's, where it sends the worker the same one at once),
    the reference's outputs kept; where the harness asks, the reference in float64 on the same inputs
    too (the numerics check: integrity/precision.py). The worker makes the same inputs from the seed:
    8 bytes travel, not the tensors."""
    seed, device = message.header.get("seed") or new_seed(), ref.device
    ref.distribution = message.header.get("distribution") or ""
    try:
        ref.outputs = ref.exact = None
        ref.state.restore()  # trial k sees the state the candidate's model sees: as constructed
        inputs = inputs_from_seed(ref.problem, device, seed, ref.distribution)
        check_inputs(inputs, "get_inputs()")
        digested = checksum(inputs)
        ref.outputs = ref.outputs_of(inputs, seed)
        if message.header.get("lint"):  # the harness asks only before the lint and not under --backward
            _lint_draw(ref, digested)
        # at another distribution the comparison holds the float64 outputs in float32 too (Exact.truth)
        extra = tensor_bytes(as_list(ref.outputs)) if ref.distribution else 0
        doubled = _doubled(ref, inputs, extra) if message.header.get("exact") or ref.distribution else None
        sync(device)
        del inputs  # before the float64 forward: its inputs in float64 are the copy it needs
        if doubled is not None:
            _exact(ref, doubled)
        unusable = _unusable(ref) if ref.distribution else ""
        if not message.header.get("keep_cache"):
            free_cache(device)  # the worker draws the same inputs next: one copy on the device, not two
        ref.output_bytes = tensor_bytes(as_list(ref.outputs))
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    return ref.send(TrialMade(seed=seed, checksum=digested, memory=memory_use(device), unusable=unusable))


def _unusable(ref: ReferenceProcess) -> str:
    """Why the trial at another distribution cannot judge the candidate, or "": it is judged against the
    reference in float64, which must be there, and finite where the reference is."""
    if ref.exact is None:
        return ("no float64 reference here (one that draws random numbers, a float64 copy too big for the memory "
                "free, or an op without a float64 kernel)")
    outputs = [o for o in as_list(ref.outputs) + ref.exact.outputs
               if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]
    if not all(bool(torch.isfinite(o).all()) for o in outputs):
        return "the reference's outputs are not all finite there"
    return ""


def _doubled(ref: ReferenceProcess, inputs: list, extra: int = 0) -> Optional[list]:
    """The trial's inputs in float64, for the numerics check, where it can be made: not under --backward, not
    for a reference that draws random numbers, and where the float64 copies (the model's, the inputs', the
    outputs') and `extra` bytes fit in half of what is free."""
    if ref.spec.backward or ref.random_draws or ref.exact_model is False:
        return None
    need = extra + precision.needs_bytes(held_bytes(ref.model) if ref.exact_model is None else 0,
                                         tensor_bytes(inputs), tensor_bytes(as_list(ref.outputs)))
    return precision.as_double(inputs) if need <= memory_available(ref.device) // 2 else None


def _exact(ref: ReferenceProcess, doubled: list) -> None:
    """The reference in float64 on the trial's inputs (`doubled`), and eager's error against it."""
    try:
        if ref.exact_model is None:
            ref.exact_model = precision.exact_model(ref.model)
        ref.exact = precision.measure(ref.exact_model, doubled, ref.outputs)
    except Exception:  # noqa: BLE001 - a module deepcopy cannot copy, an op without a float64 kernel: unmeasured
        ref.exact_model, ref.exact = False, None
        free_cache(ref.device)


def _lint_draw(ref: ReferenceProcess, digested: list) -> None:
    """The trial's draw is one of the problem lint's too: the lint then needs no draws of its own."""
    ref.lint_draws = ref.lint_draws or lint.Draws(tolerances=ref.spec.tolerances)
    if ref.lint_draws.warnings is None:  # the trials after its last draw are the check's alone
        ref.lint_draws.add(digested, ref.outputs)


READ_DIFFERS = ("its outputs as read for the comparison are not what its process summed once its forward "
                "returned and the device was synchronized: they changed after it returned")


def compare_outputs(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The candidate's outputs for the trial, relayed, compared with the reference's once they are read
    as the worker summed them (TrialOutputs.read_sums): a transfer the harness lost is never compared.
    Where the trial is the numerics check's, its error against float64 beside eager's too."""
    tree, candidate, differs, found, figures = message.header.get("outputs"), None, False, None, []
    try:
        candidate = channel.unflatten(tree, message.tensors)
        differs = checksum(message.tensors) != message.header.get("read_sums")
        if differs:
            result = CheckResult(False, reasons=[READ_DIFFERS])
        else:
            # at another distribution, the truth is float64's, atol follows the inputs' scale, and eager's own
            # error there is allowed beside it
            truth = ref.distribution and ref.exact is not None
            outputs, scale = as_list(ref.outputs), distributions.named(ref.distribution).atol_scale if truth else 1.0

            def tolerances(dtype: str) -> tuple[float, float]:
                atol, rtol = tolerance(ref.spec.tolerances, dtype)
                return atol * scale, rtol

            result = compare.compare(ref.exact.truth(outputs) if truth else ref.outputs, candidate,
                                     channel.devices(tree), tolerances,
                                     grad_tolerances=lambda dtype: tolerance(ref.grads, dtype),
                                     slack=ref.exact.slack(outputs) if truth else None, **ref.layout)
            if ref.exact is not None and result.passed:
                labels = [f"output {i}" for i in range(len(ref.exact.outputs))]
                found, figures = precision.shortfall(ref.exact, as_list(candidate), labels)
    except channel.ChannelError as exc:
        result = CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"])
    # both sides' outputs go as soon as they are compared (the serving loop keeps the message, not its tensors)
    keep = message.header.get("keep_cache") is True  # the harness's, which it sets on every comparison it relays
    message.tensors.clear()
    del candidate
    ref.outputs, ref.exact, ref.distribution = None, None, ""
    if not keep:
        free_cache(ref.device)
    return ref.send(Checked(check=result, read_differs=differs, memory=memory_use(ref.device),
                            precision=figures, shortfall=found.label if found else ""))


def _entry(ref: ReferenceProcess, fn, owner=None, wrap=lambda f: f, observe=None,
           warmups: Optional[int] = clock.RAN_HERE, found=None) -> clock.Entry:
    """A timing entry for `fn` (the reference, a twin, the compiled reference) on inputs drawn into the
    same tensors call after call; under --backward its forward and backward (`found`: which outputs get
    an upstream gradient)."""
    make = SameTensors(ref.problem, ref.device)
    if found is None:
        made = clock.Entry(make, wrap(fn), observe)
    else:
        made = backward.timed(make, fn, backward.own_parameters(owner or ref.model), found, ref.device,
                              observe, wrap=wrap)
    return replace(made, warmups=warmups)


def _metas(ref: ReferenceProcess):
    """--backward: which of the reference's outputs each timed call draws an upstream gradient for."""
    return backward.output_metas(ref.model, inputs_from_seed(ref.problem, ref.device, new_seed())) \
        if ref.spec.backward else None


def time_reference(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The reference alone, with the candidate's worker paused: the yardstick for the reference timed
    beside the candidate; its twins, its compiled form and its default numerics where asked."""
    request = from_dict(Request, message.header)
    model, device = ref.model, ref.device
    try:
        found = _metas(ref)
        entries = {"reference": _entry(ref, model, found=found)}
        if request.default_numerics:
            entries["reference_defaults"] = _entry(ref, model, wrap=at_default_numerics, found=found)
        for n, twin in enumerate(twins(model, device, request.placement_budget), 1):
            entries[f"placement_{n}"] = _entry(ref, twin, twin, found=found)
        if request.compile_baseline:
            if ref.compiled is None:  # compiled once per reference process
                ref.compiled = torch.compile(model)
            entries["compiled"] = _entry(ref, ref.compiled, warmups=None, found=found)
            if request.default_numerics:
                entries["compiled_defaults"] = _entry(ref, ref.compiled, wrap=at_default_numerics, warmups=None,
                                                      found=found)
        results = clock.time_interleaved(entries, device, request.rule)
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    del entries  # the twins with them
    free_cache(device)
    return ref.send(ReferenceTimed(timings=results, memory=memory_use(device)))


def start_timing(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The reference's entries for a timing beside the candidate's worker: its outputs sampled as the
    candidate's are (and dropped), so that every timed call is followed by the same work."""
    request = from_dict(Request, message.header)
    mirrored = TimedOutputs(ref.device)
    try:
        found, watch = _metas(ref), party.observer(mirrored)
        entries = {"reference": _entry(ref, ref.model, observe=watch, found=found)}
        if request.default_numerics:  # eager as users run it, beside the candidate too
            entries["reference_defaults"] = _entry(ref, ref.model, wrap=at_default_numerics, observe=watch,
                                                   found=found)
        if ref.spec.backward:  # each forward alone beside them (unchecked, shown only)
            entries["reference_forward"] = _entry(ref, ref.model)
        ref.timing = party.start(entries, ref.device, request.rule, mirrored)
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    return ref.send(PartyReady(entries=list(entries)))


def time_batch(ref: ReferenceProcess, message: channel.Message) -> bool:
    try:
        sampled = party.batch(ref.timing, from_dict(Request, message.header))
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    return ref.send(sampled)


def end_timing(ref: ReferenceProcess, message: channel.Message) -> bool:
    party.end(ref.timing)  # the mirrored samples go with it
    ref.timing = None
    free_cache(ref.device)
    return ref.send(Reply(memory=memory_use(ref.device)))


def set_shape(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The reference at another shape, rebuilt afresh; one that cannot be built there is the
    problem's limit, not a candidate's failure: the main shape comes back."""
    request = from_dict(Request, message.header)
    problem, spec, device = ref.problem, ref.spec, ref.device
    # the old shape's model goes first: the device never holds it beside the new one
    ref.model = ref.state = ref.outputs = ref.compiled = ref.exact_model = ref.exact = None
    if ref.lint_draws is not None and ref.lint_draws.warnings is None:
        ref.lint_draws = None  # too few at the main shape: the lint draws its own there
    free_cache(device)
    try:
        ref.shapes.set(request.shape or {})
        model = build_reference(problem, spec, device)
        with torch.no_grad():  # a shape the reference cannot run is no shape to check a candidate at
            check_outputs(model(*inputs_from_seed(problem, device, new_seed())))
        reply = ShapeSet(applied=True)
    except Exception as exc:  # noqa: BLE001
        model = None
        free_cache(device)
        ref.shapes.set({})
        model = build_reference(problem, spec, device)
        reply = ShapeSet(reason=f"the reference cannot be built there: {type(exc).__name__}: {exc}"[:500])
    ref.take(model)
    free_cache(device)  # what the trial run left cached goes back, for the worker's build
    return ref.send(reply)


def verify_timed_outputs(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The candidate's timed-output samples, relayed, re-checked against the reference on their seeds."""

    def reference_outputs(seed: int) -> list:
        ref.state.restore()
        return as_list(ref.outputs_of(inputs_from_seed(ref.problem, ref.device, seed), seed))

    result, failed = verify_timed(message.header.get("timed") or [], message.tensors, reference_outputs,
                                  ref.spec.tolerances, grad_tolerances=ref.grads, **ref.layout)
    message.tensors.clear()
    free_cache(ref.device)
    return ref.send(Checked(check=result, failed_calls=failed, memory=memory_use(ref.device)))


def lint_problem(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The problem lint's warnings, at the main shape from the state as constructed: asked once the
    problem's first check is over, not in the load, which every problem's first check waits for.
    Where that check's first trials were its draws (make_trial), they are said at once; else the
    lint draws its own."""
    drawn, ref.lint_draws = ref.lint_draws, None
    if drawn is not None and drawn.warnings is not None:
        return ref.send(Linted(warnings=drawn.warnings, seconds=round(drawn.seconds, 3),
                               memory=memory_use(ref.device)))
    del drawn  # too few trials (one that failed, --trials 1 or 2): their draws go
    started, device = time.monotonic(), ref.device
    try:
        ref.state.restore()
        warnings = lint.lint_reference(ref.model, lambda: inputs_from_seed(ref.problem, device, new_seed()),
                                       tolerances=ref.spec.tolerances)
    except Exception as exc:  # noqa: BLE001
        warnings = [f"the problem lint could not run: {type(exc).__name__}: {exc}"]
    free_cache(device)  # as after the load: each trial restores the state it needs
    return ref.send(Linted(warnings=warnings, seconds=round(time.monotonic() - started, 3), memory=memory_use(device)))


Handler = Callable[[ReferenceProcess, channel.Message], bool]
HANDLERS: dict[Command, Handler] = {
    Command.MAKE_TRIAL: make_trial, Command.COMPARE: compare_outputs, Command.TIME_REFERENCE: time_reference,
    Command.TIME_START: start_timing, Command.TIME_BATCH: time_batch, Command.TIME_END: end_timing,
    Command.SHAPE: set_shape, Command.VERIFY_TIMED: verify_timed_outputs, Command.LINT: lint_problem}


def _serve(ref: ReferenceProcess) -> None:
    """The harness's commands until EXIT (or one this role has no handler for), or a failure."""
    device = ref.device
    while True:
        # a candidate's outputs may not be much bigger than the reference's (plus the timed samples)
        limit = 4 * ref.output_bytes + (64 << 20)
        try:
            message = channel.recv(ref.conn, max_bytes=limit, pin=device.type == "cuda",
                                   gpu=device if device.type == "cuda" else None)
        except channel.ChannelError as exc:
            # what the candidate sent was malformed: that is its failure, not ours
            ref.send(Checked(check=CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"])))
            continue
        # The harness sets cmd, on relayed messages too; the rest of a relayed message is the
        # candidate's and is read field by field, so a forged one cannot break this process.
        handler = HANDLERS.get(from_dict(Command, message.header.get("cmd")))
        if handler is None or not handler(ref, message):
            return
