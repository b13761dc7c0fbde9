"""GPU facts and the default device: what the GPUs are, what to build for, what
the prompt says about the hardware (name, arch, memory bandwidth); and the CPU's
model and vector extensions, where the device is the CPU.

Read from nvidia-smi, so the harness process never initialises CUDA itself.
Bandwidth is the vendor's peak figure; nvidia-smi does not report it. The CPU's
facts are /proc/cpuinfo's.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .errors import HarnessError

# What to run instead on a machine without a GPU (README names it too).
CPU_EXAMPLE = "harness eval tests/problems/small_layernorm.py tests/candidates/cpp_layernorm.py --device cpu"
# Marks of a candidate that can run only on a CUDA GPU: cheap to find, before any build.
_CUDA_ONLY = ((re.compile(r"\bcuda_sources\s*="), "it passes cuda_sources to load_inline"),
              (re.compile(r"^\s*(?:import|from)\s+triton\b", re.M), "it imports triton"))


class NoGPUError(HarnessError):
    """CUDA work asked of a machine without a CUDA GPU."""


@functools.lru_cache(maxsize=None)
def nvidia_smi(query: str) -> list[str]:
    """One field per visible GPU, or [] where there is no NVIDIA driver."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def gpu_arch(device: str, gpu: Optional[int] = None) -> str:
    """The arch to build for: a GPU's compute capability ("9.0"), or "cpu".

    `gpu` is a physical index as nvidia-smi counts; by default the first GPU
    this process may use."""
    if not device.startswith("cuda"):
        return "cpu"
    caps = nvidia_smi("compute_cap")
    if gpu is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        gpu = int(visible) if visible.isdigit() else 0
    return caps[gpu] if gpu < len(caps) else (caps[0] if caps else "unknown")


def cuda_present() -> bool:
    import torch

    return torch.backends.cuda.is_built() and bool(nvidia_smi("name"))


def default_device() -> str:
    return "cuda" if cuda_present() else "cpu"


def _no_gpu() -> str:
    import torch

    if not torch.backends.cuda.is_built():
        return f"this torch {torch.__version__} is built without CUDA"
    return "nvidia-smi finds no NVIDIA GPU"


def require_cuda(device: str) -> None:
    """NoGPUError where `device` is CUDA and this machine has no CUDA GPU."""
    if device.startswith("cuda") and not cuda_present():
        raise NoGPUError(f"--device {device} needs a CUDA GPU, and this machine has none ({_no_gpu()}). "
                         "Run on a machine with an NVIDIA GPU, or evaluate a CPU candidate with --device "
                         f"cpu, such as `{CPU_EXAMPLE}`.")


def cuda_only(source: str) -> Optional[str]:
    """Why a candidate's source can run only on a CUDA GPU, or None where nothing says so."""
    return next((why for pattern, why in _CUDA_ONLY if pattern.search(source)), None)


def refuse_cuda_only(what: str, source: str) -> None:
    """NoGPUError for a CUDA-only candidate on a machine without a GPU: it could only fail to build.
    `what` names it as a sentence begins: "Candidate file x.py", "The candidate's source"."""
    why = cuda_only(source)
    if why and not cuda_present():
        raise NoGPUError(f"{what} is CUDA ({why}) and needs a CUDA GPU, and this machine "
                         f"has none ({_no_gpu()}): it could only fail to build. Run it on a machine with an "
                         f"NVIDIA GPU; here, try a CPU candidate: `{CPU_EXAMPLE}`.")

# Peak memory bandwidth in TB/s by a distinctive part of the device name; the
# first match wins, so more specific names come first.
PEAK_BANDWIDTH_TBS = (
    ("GB200", 8.0), ("B200", 8.0), ("GH200", 4.0), ("H200", 4.8), ("H100 NVL", 3.9),
    ("H100 PCIe", 2.0), ("H100", 3.35), ("H800", 3.35), ("A100-SXM4-80GB", 2.04),
    ("A100 80GB PCIe", 1.94), ("A100", 1.56), ("A800", 2.04), ("L40S", 0.864), ("L40", 0.864),
    ("L4", 0.3), ("A10G", 0.6), ("A10", 0.6), ("RTX 5090", 1.79), ("RTX 4090", 1.01),
    ("RTX 3090", 0.936), ("V100", 0.9), ("T4", 0.32),
)


@dataclass
class DeviceInfo:
    device: str
    name: str
    arch: str  # compute capability such as "9.0", or "cpu"
    bandwidth_tbs: Optional[float] = None

    @property
    def sm(self) -> str:
        """The arch as nvcc spells it: sm_90."""
        return "sm_" + self.arch.replace(".", "") if self.arch[:1].isdigit() else self.arch


def peak_bandwidth(name: str) -> Optional[float]:
    for part, tbs in PEAK_BANDWIDTH_TBS:
        if part.lower() in name.lower():
            return tbs
    return None


CPUINFO = Path("/proc/cpuinfo")
# The vector extensions a C++ kernel for the CPU may use, as /proc/cpuinfo names them (x86's `flags`,
# Arm's `Features`), in the order the table lists them; Arm's asimd is NEON.
VECTOR_EXTENSIONS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl",
                     "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
                     "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme")
SHOWN_AS = {"asimd": "neon (asimd)"}


@dataclass
class CpuInfo:
    name: str  # the model name, else the machine's architecture
    extensions: list[str] = field(default_factory=list)


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's model name and vector extensions in /proc/cpuinfo's text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip().lower(), value.strip())
    found = set((fields.get("flags") or fields.get("features") or "").split())
    name = fields.get("model name") or platform.processor() or platform.machine() or "CPU"
    return CpuInfo(name, [SHOWN_AS.get(f, f) for f in VECTOR_EXTENSIONS if f in found])


@functools.lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    try:
        return parse_cpuinfo(CPUINFO.read_text(errors="replace"))
    except OSError:  # not Linux
        return parse_cpuinfo("")


def describe(device: str) -> DeviceInfo:
    if not device.startswith("cuda"):
        return DeviceInfo(device, cpu_info().name, "cpu")
    names = nvidia_smi("name")
    index = int(device.split(":")[1]) if ":" in device else 0
    name = names[index] if index < len(names) else (names[0] if names else "unknown GPU")
    return DeviceInfo(device, name, gpu_arch(device), peak_bandwidth(name))


def physical_gpu(index: int) -> int:
    """The GPU nvidia-smi counts for torch's cuda:`index`: among CUDA_VISIBLE_DEVICES where it is set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
    if entries is None:
        gpu = index
    elif index < len(entries) and entries[index].isdigit():
        gpu = int(entries[index])
    else:
        raise NoGPUError(f"--device cuda:{index} names no GPU: CUDA_VISIBLE_DEVICES={visible!r} leaves "
                         f"{len(entries)} GPU(s), counted from cuda:0 in that list.")
    count = len(nvidia_smi("name"))
    if count and gpu >= count:
        raise NoGPUError(f"--device cuda:{index} names no GPU: this machine has {count}, cuda:0 to cuda:{count - 1}.")
    return gpu


def visible_gpus() -> list[int]:
    """Physical indices (as nvidia-smi counts) of the GPUs this process may use."""
    count = len(nvidia_smi("name"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    return [int(v) for v in visible.split(",") if v.strip().isdigit() and int(v) < count]
