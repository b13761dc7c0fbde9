"""How close a time is to what the hardware allows.

A problem may declare `roofline_bytes()` (the fewest bytes its forward must
move through memory) and `roofline_flops()`. The device's peaks are measured
once (a large copy, a large float32 matrix product) and cached per device
name. A candidate faster than the bytes allow at the measured peak is not
measuring what it claims.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..files import write_atomic
from ..results import Roofline

# Below this share of the floor a time is impossible, not merely good: a kernel may move its bytes a
# little faster than a plain copy does, and the measured peak has noise of its own.
IMPOSSIBLE_SHARE = 0.85
SUSPICIOUS_SPEEDUP = 10.0
PEAK_GAP_S = 0.002  # between two calls of measure_peaks
_clock, _sleep = time.perf_counter, time.sleep  # a CPU's clock for measure_peaks (a test scripts it)


# How the peaks are measured (measure_peaks); a cached figure measured another way is measured again.
# 2: the fastest of many calls, each on CUDA events (4234-4249 GB/s on an H200). The median of ten, each
# on the host's clock, read 3302 GB/s on that kind of card (another process's kernels in the window),
# the cache kept it, and an honest RMSNorm at 3963 GB/s was refused as faster than the hardware.
PEAKS_METHOD = 2


@dataclass
class Peaks:
    device_name: str
    bandwidth_gbs: float  # bytes read + written per second, in GB/s
    tflops_fp32: float
    method: int = 0  # PEAKS_METHOD where measured the current way
    threads: int = 0  # on a CPU, torch's intra-op threads the copy and the product ran on (the timing's)


def assess(bytes_: Optional[int], flops: Optional[int], peaks: Optional[Peaks], median_ms: float) -> Roofline:
    out = Roofline(bytes=bytes_, flops=flops)
    seconds = median_ms / 1e3
    if bytes_ and seconds > 0:
        out.achieved_gbs = bytes_ / seconds / 1e9
        if peaks and peaks.bandwidth_gbs > 0:
            out.floor_ms = bytes_ / (peaks.bandwidth_gbs * 1e9) * 1e3
            out.bandwidth_share = out.achieved_gbs / peaks.bandwidth_gbs
    if flops and seconds > 0:
        out.achieved_tflops = flops / seconds / 1e12
        if peaks and peaks.tflops_fp32 > 0:
            out.flops_share = out.achieved_tflops / peaks.tflops_fp32
    return out


@dataclass
class Headroom:
    """The reference's time against the hardware, before any candidate: how far a kernel can go.

    A candidate's call takes at least the floor (the declared bytes at the measured peak
    bandwidth) plus the host's time for a call that does nothing (`host_ms`, an empty call
    under the same clock), so no speedup beyond `ceiling` can be measured."""

    reference_ms: float
    host_ms: float
    roofline: Optional[Roofline] = None  # where the problem declares its bytes or flops

    @property
    def ceiling(self) -> Optional[float]:
        floor = self.roofline.floor_ms if self.roofline else None
        if not floor or self.reference_ms <= 0:
            return None
        return self.reference_ms / (floor + max(self.host_ms, 0.0))


def headroom(reference_ms: float, host_ms: float, declared: dict[str, int], peaks: Optional[Peaks]) -> Headroom:
    line = assess(declared.get("bytes"), declared.get("flops"), peaks, reference_ms) if declared else None
    return Headroom(reference_ms, host_ms, line)


def impossible(roofline: Roofline, median_ms: float) -> bool:
    return roofline.floor_ms is not None and median_ms < IMPOSSIBLE_SHARE * roofline.floor_ms


# --- the peaks cache (harness side) --------------------------------------------

def cached_peaks(cache_dir: Path, device_name: str) -> Optional[Peaks]:
    try:
        data = json.loads((Path(cache_dir) / "peaks.json").read_text()).get(device_name)
        peaks = Peaks(**data) if data else None
    except (OSError, ValueError, TypeError):
        return None
    return peaks if peaks and peaks.method == PEAKS_METHOD else None


def store_peaks(cache_dir: Path, peaks: Peaks) -> None:
    path = Path(cache_dir) / "peaks.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[peaks.device_name] = peaks.__dict__
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2))


# --- measuring (in the reference process, which never runs candidate code) ----

def measure_peaks(device, device_name: str) -> Peaks:
    """A large copy's bandwidth and a large matrix product's rate, each its fastest call: other processes'
    work (a GPU runs two processes' kernels by turns) and the host only ever slow a call down, and a
    figure too low here would call an honest kernel impossible. The calls are spread over about a tenth
    of a second, so a burst of another process's work cannot cover them all."""
    import torch

    def fastest_seconds(fn, reps: int) -> float:
        fn()
        times = []
        for _ in range(reps):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = _clock()
                fn()
                times.append(_clock() - t0)
            _sleep(PEAK_GAP_S)
        return min(times)

    big = 1 << 30 if device.type == "cuda" else 1 << 28
    src = torch.empty(big // 4, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    bandwidth = 2 * src.nbytes / fastest_seconds(lambda: dst.copy_(src), 30) / 1e9
    n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    tflops = 2 * n ** 3 / fastest_seconds(lambda: a @ b, 5) / 1e12
    return Peaks(device_name=device_name, bandwidth_gbs=bandwidth, tflops_fp32=tflops, method=PEAKS_METHOD,
                 threads=0 if device.type == "cuda" else torch.get_num_threads())


def flops_text(tflops: float) -> str:
    """A FLOP rate in the unit that shows it: a CPU core's or a small kernel's is GFLOP/s."""
    return f"{tflops:.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:.3g} GFLOP/s"


def roofline_text(line: Roofline) -> str:
    parts = []
    if line.achieved_gbs is not None:
        text = f"{line.achieved_gbs:.0f} GB/s"
        if line.bandwidth_share is not None:
            text += f" = {line.bandwidth_share:.0%} of the measured peak (floor {line.floor_ms:.4g} ms)"
        parts.append(text)
    if line.achieved_tflops is not None:
        text = flops_text(line.achieved_tflops)
        if line.flops_share is not None:
            text += f" = {line.flops_share:.0%} of fp32 peak"
        parts.append(text)
    return "; ".join(parts)
