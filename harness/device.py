"""GPU facts and the default device: what the GPUs are, what to build for, what
the prompt says about the hardware (name, arch, memory bandwidth).

Read from nvidia-smi, so the harness process never initialises CUDA itself.
Bandwidth is the vendor's peak figure; nvidia-smi does not report it.
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from typing import Optional


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


def default_device() -> str:
    import torch

    return "cuda" if torch.backends.cuda.is_built() and nvidia_smi("name") else "cpu"

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


def describe(device: str) -> DeviceInfo:
    if not device.startswith("cuda"):
        return DeviceInfo(device, platform.processor() or platform.machine() or "CPU", "cpu")
    names = nvidia_smi("name")
    index = int(device.split(":")[1]) if ":" in device else 0
    name = names[index] if index < len(names) else (names[0] if names else "unknown GPU")
    return DeviceInfo(device, name, gpu_arch(device), peak_bandwidth(name))
