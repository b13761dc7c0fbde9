"""The reference role: the reference process of one problem on one device.

It builds the reference, draws trial inputs from fresh seeds, keeps the
reference outputs, and compares what the candidate returned. It never runs
candidate code, so the reference outputs never live where the candidate runs.
After the load it serves the harness's commands, one handler each (HANDLERS).
"""
from __future__ import annotations

import contextlib
import copy
import platform
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional

import torch

from ...files import new_seed
from ...integrity import lint
from ...integrity.digest import changed, checksum, digest
from ...integrity.guards import at_default_numerics, pytorch_default_numerics
from ...integrity.recheck import verify_timed
from ...problem import Shapes, benchmark_shapes, shape_variants, tolerance
from ...results import CheckResult, as_list, from_dict, to_dict
from ..checking import compare
from ..processes import channel
from ..processes.device_lock import DeviceLock
from ..processes.footprint import TWIN_PADS_MIB, twin_count
from ..processes.protocol import (Checked, Command, Linted, ReferenceHolding, ReferenceReady, ReferenceSpec,
                                  ReferenceTimed, Reply, Request, ShapeSet, TrialMade)
from ..timing import clock
from . import backward, warm
from .common import (Laps, State, check_inputs, error_message, import_file, in_mode, inputs_from_seed, reference_from,
                     settle, sync)
from .facts import hardware_facts, input_facts, problem_roofline
from .memory import Parking, free_cache, held_bytes, memory_available, memory_use, peak_above, tensor_bytes


def changed_by_default_numerics(reference, inputs: list, exact: list, device: torch.device) -> tuple[bool, int]:
    """Whether PyTorch's default float32 settings change the reference's outputs (`exact`,
    under IEEE float32) on these inputs (they do where cuDNN convolutions may use TF32);
    where they do not, one timing of the reference serves as both baselines. Also the most
    that forward allocated (peak_above): its algorithms, so its workspace, may differ."""
    with torch.no_grad(), pytorch_default_numerics():
        usual, peak = peak_above(device, lambda: as_list(reference(*inputs)))
    return len(exact) != len(usual) or not all(map(lint.identical, exact, usual)), peak


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


def check_outputs(outputs) -> None:
    """The reference must return tensors: a plain value (a float, None) is the problem's fault,
    said here at load, not a candidate's failure later."""
    for i, out in enumerate(as_list(outputs)):
        if type(out) is not torch.Tensor:
            where = f"output {i} of Model.forward is" if isinstance(outputs, (list, tuple)) else \
                "Model.forward returns"
            kind = "None" if out is None else f"a {type(out).__qualname__}"
            raise TypeError(f"{where} {kind}, not a torch.Tensor; the harness compares tensors, so return "
                            "one (wrap a number in torch.tensor(...)) or a tuple of them")


def _failure(exc: BaseException) -> str:
    """How the harness should read a failure of the reference: running out of memory is the
    device's limit, not a broken problem file."""
    return "out_of_memory" if isinstance(exc, torch.OutOfMemoryError) else "problem_error"


def build_reference(problem, spec: ReferenceSpec, device: torch.device) -> torch.nn.Module:
    init_args = list(problem.get_init_inputs())
    check_inputs(init_args, "get_init_inputs()")
    return in_mode(reference_from(problem, init_args, spec, device).to(device), spec.model_mode)


@contextlib.contextmanager
def holding_device(conn, spec: ReferenceSpec) -> Iterator[None]:
    """The device's lock while the problem loads, where the harness asks for it, and says when held.
    A timing waiting for it goes first: a sweep times the current problem while the next one loads."""
    if not spec.device_key:
        yield
        return
    with DeviceLock(Path(spec.cache_dir), spec.device_key, owner=spec.lock_owner or None, defer=True):
        channel.send(conn, to_dict(ReferenceHolding()))
        yield


def grad_allowance(reference, sample: list, seed: int, device: torch.device, layout: dict,
                   random_draws: str) -> tuple[list[float], str]:
    """What each gradient's atol gains from the reference's own rounding (backward.rounding_allowance),
    and why it gains nothing where it cannot be measured."""
    if random_draws:  # a float64 copy draws other random numbers: its error would not be rounding
        return [], "the gradients are held to the outputs' tolerance alone: the reference draws random numbers"
    try:
        allowance = backward.rounding_allowance(reference, sample, seed, device, layout["first_gradient"])
    except Exception as exc:  # noqa: BLE001 - out of memory, a module deepcopy cannot copy
        first = (str(exc).splitlines() or [""])[0][:160]
        return [], (f"the gradients are held to the outputs' tolerance alone: the reference's float64 copy, which "
                    f"measures its own rounding, failed ({type(exc).__name__}: {first})")
    finally:
        free_cache(device)
    return allowance, ""


@dataclass
class ReferenceProcess:
    """What the reference process keeps between commands: the problem, its reference at the current
    shape, and a trial's reference outputs until they are compared."""

    conn: channel.Channel
    spec: ReferenceSpec
    device: torch.device
    problem: ModuleType
    shapes: Shapes
    model: Optional[torch.nn.Module] = None
    state: Optional[State] = None
    parking: Optional[Parking] = None
    # --backward: each entry's label, where the gradients start, their atol's allowance
    layout: dict = field(default_factory=dict)
    compiled: Optional[Callable] = None  # torch.compile's reference, compiled once per reference process
    outputs: Any = None  # the reference's outputs for the trial drawn last, until compared
    output_bytes: int = 0
    # the problem lint's draws, where the check's first trials serve it (make_trial); None once it is said
    lint_draws: Optional[lint.Draws] = None

    def take(self, model: torch.nn.Module) -> None:
        """`model` is the reference from now on, its buffers as built."""
        self.model, self.state, self.parking = model, State(model), Parking(model, self.device)

    @property
    def grads(self) -> dict[str, list[float]]:
        return self.spec.grad_tolerances or self.spec.tolerances

    def training(self) -> backward.Training:
        return backward.Training(self.model, backward.own_parameters(self.model))

    def outputs_of(self, inputs: list, seed: int):
        """The reference's outputs for a trial's inputs: under --backward, its outputs and gradients."""
        if self.spec.backward:
            return backward.trial(self.training(), inputs, seed, self.device, digest, changed)[0]
        with torch.no_grad():
            return self.model(*inputs)

    def send(self, reply: Reply) -> bool:
        channel.send(self.conn, to_dict(reply))
        return True

    def fail(self, exc: BaseException) -> bool:
        """The failure told to the harness; the process ends."""
        channel.send(self.conn, error_message(_failure(exc), exc))
        return False


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
            ref, info = _load(conn, spec, device, laps)
        except BaseException as exc:  # noqa: BLE001
            channel.send(conn, error_message(_failure(exc), exc))
            return
        _describe(ref, info, laps)
    info.load_seconds = {**laps.laps, **({"spare_first_calls": round(warm.first_calls_s, 3)}
                                         if warm.first_calls_s is not None else {})}
    channel.send(conn, to_dict(info))
    _serve(ref)


def _load(conn, spec: ReferenceSpec, device: torch.device, laps: Laps) -> tuple[ReferenceProcess, ReferenceReady]:
    """The problem imported, its reference built and run on a sample of its inputs: what the harness
    learns before the first trial (the device's facts, the roofline and the lint are added after)."""
    problem = import_file(spec.problem, "problem")
    model = build_reference(problem, spec, device)
    laps.lap("model")
    ref = ReferenceProcess(conn, spec, device, problem, Shapes(problem))
    ref.take(model)
    info = ReferenceReady(ready=True, shapes=shape_variants(problem), benchmark_shapes=benchmark_shapes(problem))
    probe = new_seed()
    sample = _first_forward(ref, probe, info, laps)
    random_draws = lint.draws_random(ref.model, sample, ref.state.restore)
    laps.lap("random_draws")
    allowance_note = _plan_backward(ref, sample, probe, random_draws, info) if spec.backward else ""
    del sample
    laps.lap("backward")
    info.warnings += [note for note in (random_draws, allowance_note) if note]
    return ref, info


def _first_forward(ref: ReferenceProcess, probe: int, info: ReferenceReady, laps: Laps) -> list:
    """The reference on a sample of its inputs: whether a seed reproduces them, the footprint (for the
    harness to say before the first trial whether the problem fits), the numerics; the sample."""
    problem, device, model = ref.problem, ref.device, ref.model
    # Trials hand the worker a seed; that only works if a seed reproduces the inputs.
    # Two draws, one alive at a time: a problem's inputs may fill most of the device.
    first = checksum(inputs_from_seed(problem, device, probe))
    sample = inputs_from_seed(problem, device, probe)
    check_inputs(sample, "get_inputs()")
    info.reproducible = checksum(sample) == first
    with torch.no_grad():
        exact, forward_peak = peak_above(device, lambda: model(*sample))
    check_outputs(exact)
    info.input_bytes, info.output_bytes = tensor_bytes(sample), tensor_bytes(as_list(exact))
    info.parameter_bytes, info.flush_bytes = held_bytes(model), clock.flush_bytes(device)
    # what is free, plus what this process already holds of the problem's own
    info.available_bytes = (memory_available(device) + info.input_bytes + info.output_bytes
                            + info.parameter_bytes)
    laps.lap("inputs_and_forward")
    info.numerics_differ, defaults_peak = changed_by_default_numerics(model, sample, as_list(exact), device)
    laps.lap("numerics")
    info.workspace_bytes = max(0, max(forward_peak, defaults_peak) - info.output_bytes)
    info.inputs = input_facts(problem, sample)
    return sample


def _plan_backward(ref: ReferenceProcess, sample: list, probe: int, random_draws: str, info: ReferenceReady) -> str:
    """--backward: what a trial's outputs hold (ref.layout), whether there is a backward to check,
    and a trial's peak; the note on the gradients' allowance ("" for none)."""
    model, device = ref.model, ref.device
    found = backward.output_metas(model, sample)
    if not any(found):
        info.no_backward = ("no output of Model.forward has a gradient (integer outputs such as argmax's, "
                            "or outputs detached from the inputs and parameters): it has no backward to "
                            "check, so it is skipped under --backward")
    names = [name for name, _ in backward.reference_parameters(model)]
    ref.layout = layout = {"labels": backward.labels(len(found), sample, names), "first_gradient": len(found)}
    note = ""
    if not info.no_backward:  # a trial's peak (saved activations, gradients) is the workspace the fit counts
        _, trial_peak = peak_above(device, lambda: len(backward.trial(ref.training(), sample, probe, device,
                                                                      digest, changed)[0]))
        info.workspace_bytes = max(info.workspace_bytes, trial_peak - info.output_bytes)
        ref.state.restore()
        if ref.spec.grad_rounding:
            layout["allowance"], note = grad_allowance(model, sample, probe, device, layout, random_draws)
    ref.state.restore()
    if layout.get("allowance"):
        info.grad_allowance = dict(zip(layout["labels"][layout["first_gradient"]:], layout["allowance"]))
    return note


def _describe(ref: ReferenceProcess, info: ReferenceReady, laps: Laps) -> None:
    """What the harness is told beside the load: the device's facts, the problem's roofline."""
    device = ref.device
    info.device_name, info.hardware = platform.processor() or platform.machine(), hardware_facts(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.device_name, info.capability = props.name, f"{props.major}.{props.minor}"
    try:
        for name, value in problem_roofline(ref.problem, device, info.device_name, ref.spec.cache_dir).items():
            setattr(info, name, value)
    except Exception as exc:  # noqa: BLE001 - a broken declaration is reported, not fatal
        info.warnings.append(f"the problem's roofline declaration failed: {type(exc).__name__}: {exc}")
    laps.lap("roofline")
    free_cache(device)
    info.memory = memory_use(device)


# --- the commands: each handler answers one, and says whether the process goes on ---------------

def make_trial(ref: ReferenceProcess, message: channel.Message) -> bool:
    """A trial drawn from a fresh seed (the harness's, where it sends the worker the same one at once),
    the reference's outputs kept. The worker makes the same inputs from the seed: 8 bytes travel,
    not the tensors."""
    seed, device = message.header.get("seed") or new_seed(), ref.device
    try:
        ref.outputs = None
        ref.parking.unpark()
        ref.state.restore()  # trial k sees the state the candidate's model sees: as constructed
        inputs = inputs_from_seed(ref.problem, device, seed)
        check_inputs(inputs, "get_inputs()")
        digested = checksum(inputs)
        ref.outputs = ref.outputs_of(inputs, seed)
        if message.header.get("lint"):  # the harness asks only before the lint and not under --backward
            _lint_draw(ref, digested)
        sync(device)
        del inputs
        if not message.header.get("keep_cache"):
            free_cache(device)  # the worker draws the same inputs next: one copy on the device, not two
        ref.output_bytes = tensor_bytes(as_list(ref.outputs))
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    return ref.send(TrialMade(seed=seed, checksum=digested, memory=memory_use(device)))


def _lint_draw(ref: ReferenceProcess, digested: list) -> None:
    """The trial's draw is one of the problem lint's too: the lint then needs no draws of its own."""
    ref.lint_draws = ref.lint_draws or lint.Draws(tolerances=ref.spec.tolerances)
    if ref.lint_draws.warnings is None:  # the trials after its last draw are the check's alone
        ref.lint_draws.add(digested, ref.outputs)


READ_DIFFERS = ("its outputs as read for the comparison are not what its process summed once its forward "
                "returned and the device was synchronized: they changed after it returned")


def compare_outputs(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The candidate's outputs for the trial, relayed, compared with the reference's once they are read
    as the worker summed them (TrialOutputs.read_sums): a transfer the harness lost is never compared."""
    tree, candidate, differs = message.header.get("outputs"), None, False
    try:
        candidate = channel.unflatten(tree, message.tensors)
        differs = checksum(message.tensors) != message.header.get("read_sums")
        if differs:
            result = CheckResult(False, reasons=[READ_DIFFERS])
        else:
            result = compare.compare(ref.outputs, candidate, channel.devices(tree),
                                     lambda dtype: tolerance(ref.spec.tolerances, dtype),
                                     grad_tolerances=lambda dtype: tolerance(ref.grads, dtype), **ref.layout)
    except channel.ChannelError as exc:
        result = CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"])
    # both sides' outputs go as soon as they are compared (the serving loop keeps the message, not its tensors)
    keep = message.header.get("keep_cache") is True  # the harness's, which it sets on every comparison it relays
    message.tensors.clear()
    del candidate
    ref.outputs = None
    if not keep:
        free_cache(ref.device)
    return ref.send(Checked(check=result, read_differs=differs, memory=memory_use(ref.device)))


def time_reference(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The reference alone, in a process no candidate touched: the yardstick for the reference timed
    beside the candidate; its twins, its compiled form and its default numerics where asked."""
    request = from_dict(Request, message.header)
    problem, device, model = ref.problem, ref.device, ref.model
    make_inputs = lambda seed: inputs_from_seed(problem, device, seed)  # noqa: E731
    ref.parking.unpark()
    try:
        # --backward: what each timed call's upstream gradients are drawn for
        found = backward.output_metas(model, make_inputs(new_seed())) if ref.spec.backward else None

        def entry(fn, owner=model, wrap=lambda f: f, warmups: Optional[int] = clock.RAN_HERE) -> clock.Entry:
            if found is None:
                made = clock.Entry(make_inputs, wrap(fn))
            else:
                made = backward.timed(make_inputs, fn, backward.own_parameters(owner), found, device, wrap=wrap)
            return replace(made, warmups=warmups)
        entries = {"reference": entry(model)}
        if request.default_numerics:
            entries["reference_defaults"] = entry(model, wrap=at_default_numerics)
        for n, twin in enumerate(twins(model, device, request.placement_budget), 1):
            entries[f"placement_{n}"] = entry(twin, twin)
        if request.compile_baseline:
            if ref.compiled is None:  # compiled once per reference process
                ref.compiled = torch.compile(model)
            entries["compiled"] = entry(ref.compiled, warmups=None)
            if request.default_numerics:
                entries["compiled_defaults"] = entry(ref.compiled, wrap=at_default_numerics, warmups=None)
        results = clock.time_interleaved(entries, device, request.rule)
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    del entries  # the twins with them
    free_cache(device)
    return ref.send(ReferenceTimed(timings=results, memory=memory_use(device)))


def set_shape(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The reference at another shape, rebuilt afresh; one that cannot be built there is the
    problem's limit, not a candidate's failure: the main shape comes back."""
    request = from_dict(Request, message.header)
    problem, spec, device = ref.problem, ref.spec, ref.device
    # the old shape's model goes first: the device never holds it beside the new one
    ref.model = ref.state = ref.parking = ref.outputs = ref.compiled = None
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


def park(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The reference's parameters to the host: the candidate's process times both models next."""
    try:
        ref.parking.park()
    except BaseException as exc:  # noqa: BLE001
        return ref.fail(exc)
    return ref.send(Reply(memory=memory_use(ref.device)))


def verify_timed_outputs(ref: ReferenceProcess, message: channel.Message) -> bool:
    """The candidate's timed-output samples, relayed, re-checked against the reference on their seeds."""
    ref.parking.unpark()

    def reference_outputs(seed: int) -> list:
        ref.state.restore()
        return as_list(ref.outputs_of(inputs_from_seed(ref.problem, ref.device, seed), seed))

    result = verify_timed(message.header.get("timed") or [], message.tensors, reference_outputs,
                          ref.spec.tolerances, grad_tolerances=ref.grads, **ref.layout)
    message.tensors.clear()
    free_cache(ref.device)
    return ref.send(Checked(check=result, memory=memory_use(ref.device)))


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
        ref.parking.unpark()
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
    Command.SHAPE: set_shape, Command.PARK: park, Command.VERIFY_TIMED: verify_timed_outputs,
    Command.LINT: lint_problem}


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
