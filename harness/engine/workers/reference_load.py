"""The reference process's state (ReferenceProcess) and its load: the problem imported, its reference
built and run on a sample of its inputs, and what the harness learns of it before the first trial
(the footprint, the numerics, the backward's layout, the device's facts, the roofline)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional

import torch

from ...device import cpu_info
from ...files import new_seed
from ...integrity import degenerate, lint, precision
from ...integrity.digest import changed, checksum, digest
from ...integrity.guards import pytorch_default_numerics
from ...problem import Shapes, benchmark_shapes, shape_variants
from ...results import as_list, to_dict
from ..processes import channel
from ..processes.device_lock import DeviceLock
from ..processes.protocol import ReferenceHolding, ReferenceReady, ReferenceSpec, Reply
from ..timing import clock
from . import backward, party
from .common import Laps, State, check_inputs, error_message, import_file, in_mode, inputs_from_seed, reference_from
from .facts import hardware_facts, input_facts, problem_roofline
from .memory import free_cache, held_bytes, memory_available, memory_use, peak_above, tensor_bytes


def changed_by_default_numerics(reference, inputs: list, exact: list, device: torch.device) -> tuple[bool, int]:
    """Whether PyTorch's default float32 settings change the reference's outputs (`exact`,
    under IEEE float32) on these inputs (they do where cuDNN convolutions may use TF32);
    where they do not, one timing of the reference serves as both baselines. Also the most
    that forward allocated (peak_above): its algorithms, so its workspace, may differ."""
    with torch.no_grad(), pytorch_default_numerics():
        usual, peak = peak_above(device, lambda: as_list(reference(*inputs)))
    return len(exact) != len(usual) or not all(map(lint.identical, exact, usual)), peak


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


def failure_kind(exc: BaseException) -> str:
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
    # --backward: each entry's label, where the gradients start, their atol's allowance
    layout: dict = field(default_factory=dict)
    compiled: Optional[Callable] = None  # torch.compile's reference, compiled once per reference process
    outputs: Any = None  # the reference's outputs for the trial drawn last, until compared
    output_bytes: int = 0
    # the problem lint's draws, where the check's first trials serve it (make_trial); None once it is said
    lint_draws: Optional[lint.Draws] = None
    random_draws: str = ""  # why the reference's outputs are random, if they are (lint.draws_random)
    # the numerics check (integrity/precision.py): the reference in float64 at the current shape, made on its
    # first use; its outputs for the trial drawn last where that trial is the check's, and eager's errors
    exact_model: Any = None
    exact: Optional[precision.Exact] = None
    # the trial drawn last is at this other distribution (integrity/distributions.py): judged against float64
    distribution: str = ""
    timing: Optional[party.Kept] = None  # a timing beside the candidate's, between its batches

    def take(self, model: torch.nn.Module) -> None:
        """`model` is the reference from now on, its buffers as built."""
        self.model, self.state, self.exact_model, self.exact = model, State(model), None, None

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
        channel.send(self.conn, error_message(failure_kind(exc), exc))
        return False


def load(conn, spec: ReferenceSpec, device: torch.device, laps: Laps) -> tuple[ReferenceProcess, ReferenceReady]:
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
    random_draws = ref.random_draws = lint.draws_random(ref.model, sample, ref.state.restore)
    laps.lap("random_draws")
    allowance_note = _plan_backward(ref, sample, probe, random_draws, info) if spec.backward else ""
    laps.lap("backward")
    info.warnings += [note for note in (random_draws, allowance_note) if note]
    _find_degenerate(ref, sample, info)
    laps.lap("degenerate")
    return ref, info


def _find_degenerate(ref: ReferenceProcess, sample: list, info: ReferenceReady) -> None:
    """Whether the problem's outputs ignore its inputs or repeat along a dimension (integrity/degenerate.py):
    the sample's outputs made again, then fresh draws, the sample let go (emptied: the caller's list) before
    the first, so that the load's peak stays one input draw and two outputs."""
    def forward(inputs: list) -> list:
        ref.state.restore()
        with torch.no_grad():
            return as_list(ref.model(*inputs))

    def draw() -> list:
        sample.clear()
        return forward(inputs_from_seed(ref.problem, ref.device, new_seed()))

    try:
        info.degenerate[:0] = degenerate.find(forward(sample), draw)  # before --backward's finding
    except Exception as exc:  # noqa: BLE001 - an auxiliary check: the problem loads without it
        said = (str(exc).splitlines() or [""])[0][:160]
        info.warnings.append(f"the check for a degenerate problem could not run: {type(exc).__name__}: {said}")
    finally:
        sample.clear()
        ref.state.restore()
        free_cache(ref.device)


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
        inputs = slice(len(found), len(found) + sum(map(backward.is_leaf_input, sample)))
        stuck, trial_peak = peak_above(device, lambda: degenerate.no_gradient(
            backward.trial(ref.training(), sample, probe, device, digest, changed)[0][inputs]))
        info.workspace_bytes = max(info.workspace_bytes, trial_peak - info.output_bytes)
        info.degenerate += [stuck] if stuck else []
        ref.state.restore()
        if ref.spec.grad_rounding:
            layout["allowance"], note = grad_allowance(model, sample, probe, device, layout, random_draws)
    ref.state.restore()
    if layout.get("allowance"):
        info.grad_allowance = dict(zip(layout["labels"][layout["first_gradient"]:], layout["allowance"]))
    return note


def describe(ref: ReferenceProcess, info: ReferenceReady, laps: Laps) -> None:
    """What the harness is told beside the load: the device's facts, the problem's roofline."""
    device = ref.device
    info.device_name, info.hardware = cpu_info().name, hardware_facts(device)
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
