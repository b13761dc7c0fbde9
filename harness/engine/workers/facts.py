"""What the reference process tells the harness about the device and the problem, for the first
prompt and the roofline: the hardware a kernel author sizes work by, each forward argument as it
arrives, and the bytes and flops the problem declares beside the device's measured peaks."""
from __future__ import annotations

import inspect
import os
from pathlib import Path

import torch

from ...device import cpu_info
from ...integrity import roofline


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


def hardware_facts(device: torch.device) -> list[str]:
    """What a kernel author sizes work by: SMs, L2, shared memory and registers; on a CPU,
    cores, caches and vector extensions."""
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
    extensions = cpu_info().extensions
    return ([f"{os.cpu_count()} cores"] + ([("caches: " + ", ".join(caches))] if caches else [])
            + ([f"vector extensions: {', '.join(extensions)}"] if extensions else []))


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
