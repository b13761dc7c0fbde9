"""What a trial's outputs' checksum costs: integrity/digest.py's checksum, which the candidate's worker
takes of its outputs and the reference process of what it read, on float32 tensors of several sizes,
four calls each in a fresh process (the first pays its kernels' first launches).

    PYTHONPATH=$PWD python bench/output_sums.py [--device cuda]
"""
from __future__ import annotations

import argparse
import time

SIZES_MB = (4e-6, 1, 4, 64, 1024, 2048, 4096)
CALLS = 4


def main() -> None:
    import torch

    from harness.integrity.digest import checksum

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(parser.parse_args().device)
    torch.zeros(1, device=device)  # the context, apart from the first call's launches
    for mb in SIZES_MB:
        x = torch.randn(max(1, int(mb * (1 << 20)) // 4), device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        calls = []
        for _ in range(CALLS):
            started = time.perf_counter()
            checksum([x])  # ends in a host read of the sum: the device's work is inside the figure
            calls.append((time.perf_counter() - started) * 1e3)
        print(f"{mb:>10g} MB on {device.type}: " + ", ".join(f"{ms:.2f}" for ms in calls) + " ms", flush=True)
        del x
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
