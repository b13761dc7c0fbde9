"""The reference role: the reference process of one problem on one device.

It builds the reference, draws trial inputs from fresh seeds, keeps the
reference outputs, and compares what the candidate returned. It never runs
candidate code, so the reference outputs never live where the candidate runs.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import os
import platform
from pathlib import Path
from typing import Iterator

import torch

from ...files import new_seed
from ...integrity import lint, roofline
from ...integrity.guards import at_default_numerics, pytorch_default_numerics
from ...integrity.recheck import verify_timed
from ...problem import Shapes, benchmark_shapes, shape_variants, tolerance
from ...results import CheckResult, as_list, from_dict, to_dict
from .. import channel, compare, timing
from ..device_lock import DeviceLock
from ..footprint import TWIN_PADS_MIB, twin_count
from . import backward
from ..protocol import (Checked, Command, ReferenceHolding, ReferenceReady, ReferenceSpec, ReferenceTimed, Reply,
                        Request, ShapeSet, TrialMade)
from ...integrity.digest import changed, checksum, digest
from .common import (Laps, State, check_inputs, error_message, import_file, in_mode, inputs_from_seed, reference_from,
                     settle, sync)
from .memory import Parking, free_cache, held_bytes, memory_available, memory_use, peak_above, tensor_bytes


def problem_roofline(problem, device: torch.device, device_name: str, cache_dir: str | None) -> dict:
    """The bytes and flops the problem declares, and the device's measured peaks."""
    declared = {name: int(getattr(problem, f"roofline_{name}")()) for name in ("bytes", "flops")
                if callable(getattr(problem, f"roofline_{name}", None))}
    if not declared:
        return {}
    peaks = roofline.cached_peaks(cache_dir, device_name) if cache_dir else None
    if peaks is None:
        peaks = roofline.measure_peaks(device, device_name)
        if cache_dir:
            roofline.store_peaks(cache_dir, peaks)
    return {"roofline": declared, "peaks": peaks}


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


def hardware_facts(device: torch.device) -> list[str]:
    """What a kernel author sizes work by: SMs, L2, shared memory and registers; on a CPU,
    cores and caches."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts = [f"{props.multi_processor_count} SMs, compute capability {props.major}.{props.minor}; "
                 f"builds target sm_{props.major}{props.minor}"]
        per_sm = [f"{value // 1024} KiB shared memory" if name == "shared_memory_per_multiprocessor"
                  else f"{value} registers" for name in ("shared_memory_per_multiprocessor", "regs_per_multiprocessor")
                  if (value := getattr(props, name, None))]
        if per_sm:
            facts.append("per SM: " + ", ".join(per_sm))
        if getattr(props, "L2_cache_size", None):
            facts.append(f"L2 cache: {props.L2_cache_size / 2**20:.0f} MiB")
        facts.append(f"memory: {props.total_memory / 2**30:.0f} GiB")
        return facts
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        caches.append(f"L{level} {kind.lower()} {size}")
    return [f"{os.cpu_count()} cores"] + ([("caches: " + ", ".join(caches))] if caches else [])


def input_facts(problem, inputs: list) -> list[str]:
    """Each forward argument as one get_inputs() call makes it: device, dtype, shape, layout."""
    try:
        names = list(inspect.signature(problem.Model.forward).parameters)[1:]
    except (TypeError, ValueError):
        names = []
    facts = []
    for i, value in enumerate(inputs):
        name = names[i] if i < len(names) else f"argument {i + 1}"
        if isinstance(value, torch.Tensor):
            layout = "contiguous" if value.is_contiguous() else f"not contiguous (strides {tuple(value.stride())})"
            facts.append(f"`{name}`: {value.device.type} {str(value.dtype).removeprefix('torch.')} "
                         f"{tuple(value.shape)}, {layout}")
        else:
            facts.append(f"`{name}`: {type(value).__name__} {value!r}"[:200])
    return facts


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
    """The device's lock while the problem loads, where the harness asks for it, and says when held."""
    if not spec.device_key:
        yield
        return
    with DeviceLock(Path(spec.cache_dir), spec.device_key, lambda holder: None):
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


def reference_role(conn, header: dict) -> None:
    spec = from_dict(ReferenceSpec, header)
    device = torch.device(spec.device)
    tolerances = spec.tolerances
    settle(device)
    layout: dict = {}  # --backward: each entry's label, where the gradients start, their atol's allowance
    allowance_note = ""
    grads = spec.grad_tolerances or tolerances

    def training() -> backward.Training:
        return backward.Training(reference, backward.own_parameters(reference))

    laps = Laps(device)  # where the load's seconds go, for a sweep's records
    if device.type == "cuda":  # the context: seconds of driver work, no kernel, so before the lock
        torch.empty(1, device=device)
    laps.lap("context")
    # Loading runs the reference (its lint too): a sweep's next problem must not do that beside the
    # current one's timing on this device, so it waits for the device here, its imports done.
    with holding_device(conn, spec):
        laps.lap("device_wait")
        try:
            problem = import_file(spec.problem, "problem")
            reference = build_reference(problem, spec, device)
            laps.lap("model")
            state, parking = State(reference), Parking(reference, device)
            shapes, variants, benchmarks = Shapes(problem), shape_variants(problem), benchmark_shapes(problem)
            compiled = None
            probe = new_seed()
            # Trials hand the worker a seed; that only works if a seed reproduces the inputs.
            # Two draws, one alive at a time: a problem's inputs may fill most of the device.
            first = checksum(inputs_from_seed(problem, device, probe))
            sample = inputs_from_seed(problem, device, probe)
            check_inputs(sample, "get_inputs()")
            reproducible = checksum(sample) == first
            with torch.no_grad():
                exact, forward_peak = peak_above(device, lambda: reference(*sample))
            check_outputs(exact)
            # the footprint, for the harness to say before the first trial whether the problem fits
            sizes = {"input_bytes": tensor_bytes(sample), "output_bytes": tensor_bytes(as_list(exact)),
                     "parameter_bytes": held_bytes(reference), "flush_bytes": timing.flush_bytes(device)}
            # what is free, plus what this process already holds of the problem's own
            sizes["available_bytes"] = (memory_available(device) + sizes["input_bytes"] + sizes["output_bytes"]
                                        + sizes["parameter_bytes"])
            laps.lap("inputs_and_forward")
            numerics_differ, defaults_peak = changed_by_default_numerics(reference, sample, as_list(exact), device)
            laps.lap("numerics")
            sizes["workspace_bytes"] = max(0, max(forward_peak, defaults_peak) - sizes["output_bytes"])
            arguments = input_facts(problem, sample)
            del exact
            random_draws = lint.draws_random(reference, sample, state.restore)
            laps.lap("random_draws")
            no_backward = ""
            if spec.backward:
                found = backward.output_metas(reference, sample)
                if not any(found):
                    no_backward = ("no output of Model.forward has a gradient (integer outputs such as argmax's, "
                                   "or outputs detached from the inputs and parameters): it has no backward to "
                                   "check, so it is skipped under --backward")
                names = [name for name, _ in backward.reference_parameters(reference)]
                layout = {"labels": backward.labels(len(found), sample, names), "first_gradient": len(found)}
                if not no_backward:  # a trial's peak (saved activations, gradients) is the workspace the fit counts
                    _, trial_peak = peak_above(device, lambda: len(backward.trial(training(), sample, probe, device,
                                                                                  digest, changed)[0]))
                    sizes["workspace_bytes"] = max(sizes["workspace_bytes"], trial_peak - sizes["output_bytes"])
                    state.restore()
                    if spec.grad_rounding:
                        layout["allowance"], allowance_note = grad_allowance(reference, sample, probe, device,
                                                                             layout, random_draws)
                state.restore()
            del sample
            laps.lap("backward")
        except BaseException as exc:  # noqa: BLE001
            channel.send(conn, error_message(_failure(exc), exc))
            return
        info = ReferenceReady(ready=True, device_name=platform.processor() or platform.machine(),
                              reproducible=reproducible, numerics_differ=numerics_differ,
                              hardware=hardware_facts(device), inputs=arguments, shapes=variants,
                              benchmark_shapes=benchmarks, no_backward=no_backward, **sizes)
        if layout.get("allowance"):
            info.grad_allowance = dict(zip(layout["labels"][layout["first_gradient"]:], layout["allowance"]))
        if random_draws:
            info.warnings.append(random_draws)
        if allowance_note:
            info.warnings.append(allowance_note)
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            info.device_name, info.capability = props.name, f"{props.major}.{props.minor}"
        try:
            for name, value in problem_roofline(problem, device, info.device_name, spec.cache_dir).items():
                setattr(info, name, value)
        except Exception as exc:  # noqa: BLE001 - a broken declaration is reported, not fatal
            info.warnings.append(f"the problem's roofline declaration failed: {type(exc).__name__}: {exc}")
        laps.lap("roofline")
        try:
            info.warnings += lint.lint_reference(reference, lambda: inputs_from_seed(problem, device, new_seed()),
                                                tolerances=tolerances)
        except Exception as exc:  # noqa: BLE001
            info.warnings.append(f"the problem lint could not run: {type(exc).__name__}: {exc}")
        free_cache(device)
        info.memory = memory_use(device)
        laps.lap("lint")
    info.load_seconds = laps.laps
    channel.send(conn, to_dict(info))
    outputs, output_bytes = None, 0
    while True:
        # a candidate's outputs may not be much bigger than the reference's (plus the timed samples)
        limit = 4 * output_bytes + (64 << 20)
        try:
            message = channel.recv(conn, max_bytes=limit, pin=device.type == "cuda",
                                   gpu=device if device.type == "cuda" else None)
        except channel.ChannelError as exc:
            # what the candidate sent was malformed: that is its failure, not ours
            channel.send(conn, to_dict(Checked(check=CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"]))))
            continue
        # The harness sets cmd, on relayed messages too; the rest of a relayed message is the
        # candidate's and is read field by field, so a forged one cannot break this process.
        cmd = from_dict(Command, message.header.get("cmd"))
        if cmd is Command.MAKE_TRIAL:
            # The worker makes the same inputs from the seed: 8 bytes travel, not the tensors.
            seed = new_seed()
            try:
                outputs = None
                parking.unpark()
                state.restore()  # trial k sees the state the candidate's model sees: as constructed
                inputs = inputs_from_seed(problem, device, seed)
                check_inputs(inputs, "get_inputs()")
                digested = checksum(inputs)
                if spec.backward:
                    outputs = backward.trial(training(), inputs, seed, device, digest, changed)[0]
                else:
                    with torch.no_grad():
                        outputs = reference(*inputs)
                sync(device)
                del inputs
                free_cache(device)  # the worker draws the same inputs next: one copy on the device, not two
                output_bytes = tensor_bytes(as_list(outputs))
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message(_failure(exc), exc))
                return
            channel.send(conn, to_dict(TrialMade(seed=seed, checksum=digested, memory=memory_use(device))))
        elif cmd is Command.COMPARE:
            tree, candidate = message.header.get("outputs"), None
            try:
                candidate = channel.unflatten(tree, message.tensors)
                result = compare.compare(outputs, candidate, channel.devices(tree),
                                         lambda dtype: tolerance(tolerances, dtype),
                                         grad_tolerances=lambda dtype: tolerance(grads, dtype), **layout)
            except channel.ChannelError as exc:
                result = CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"])
            # both sides' outputs go as soon as they are compared
            del message, candidate
            outputs = None
            free_cache(device)
            channel.send(conn, to_dict(Checked(check=result, memory=memory_use(device))))
        elif cmd is Command.TIME_REFERENCE:
            request = from_dict(Request, message.header)
            # The reference alone, in a process no candidate touched: the yardstick
            # for the reference timed beside the candidate.
            make_inputs = lambda seed: inputs_from_seed(problem, device, seed)  # noqa: E731
            parking.unpark()
            try:
                # --backward: what each timed call's upstream gradients are drawn for
                found = backward.output_metas(reference, make_inputs(new_seed())) if spec.backward else None

                def entry(fn, model=reference, wrap=lambda f: f) -> timing.Entry:
                    if found is None:
                        return timing.Entry(make_inputs, wrap(fn))
                    return backward.timed(make_inputs, fn, backward.own_parameters(model), found, device, wrap=wrap)
                entries = {"reference": entry(reference)}
                if request.default_numerics:
                    entries["reference_defaults"] = entry(reference, wrap=at_default_numerics)
                for n, twin in enumerate(twins(reference, device, request.placement_budget), 1):
                    entries[f"placement_{n}"] = entry(twin, twin)
                if request.compile_baseline:
                    if compiled is None:  # compiled once per reference process
                        compiled = torch.compile(reference)
                    entries["compiled"] = entry(compiled)
                    if request.default_numerics:
                        entries["compiled_defaults"] = entry(compiled, wrap=at_default_numerics)
                results = timing.time_interleaved(entries, device, request.rule)
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message(_failure(exc), exc))
                return
            del entries  # the twins with them
            free_cache(device)
            channel.send(conn, to_dict(ReferenceTimed(timings=results, memory=memory_use(device))))
        elif cmd is Command.SHAPE:
            # The reference at another shape, rebuilt afresh; one that cannot be built there is the
            # problem's limit, not a candidate's failure: the main shape comes back.
            request = from_dict(Request, message.header)
            # the old shape's model goes first: the device never holds it beside the new one
            reference = state = parking = outputs = compiled = None
            free_cache(device)
            try:
                shapes.set(request.shape or {})
                reference = build_reference(problem, spec, device)
                with torch.no_grad():  # a shape the reference cannot run is no shape to check a candidate at
                    check_outputs(reference(*inputs_from_seed(problem, device, new_seed())))
                reply = ShapeSet(applied=True)
            except Exception as exc:  # noqa: BLE001
                reference = None
                free_cache(device)
                shapes.set({})
                reference = build_reference(problem, spec, device)
                reply = ShapeSet(reason=f"the reference cannot be built there: {type(exc).__name__}: {exc}"[:500])
            state, parking = State(reference), Parking(reference, device)
            free_cache(device)  # what the trial run left cached goes back, for the worker's build
            channel.send(conn, to_dict(reply))
        elif cmd is Command.PARK:
            try:
                parking.park()  # the candidate's process times both models next
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message(_failure(exc), exc))
                return
            channel.send(conn, to_dict(Reply(memory=memory_use(device))))
        elif cmd is Command.VERIFY_TIMED:
            parking.unpark()

            def reference_outputs(seed: int) -> list:
                state.restore()
                inputs = inputs_from_seed(problem, device, seed)
                if spec.backward:
                    return backward.trial(training(), inputs, seed, device, digest, changed)[0]
                with torch.no_grad():
                    return as_list(reference(*inputs))

            result = verify_timed(message.header.get("timed") or [], message.tensors, reference_outputs,
                                  tolerances, grad_tolerances=grads, **layout)
            del message
            free_cache(device)
            channel.send(conn, to_dict(Checked(check=result, memory=memory_use(device))))
        else:
            return
