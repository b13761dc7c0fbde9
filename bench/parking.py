"""Seconds to move a big model's weights to the host and back: through pageable memory (what
`Module.to` does) against the page-locked copies `Parking` keeps, whose first park page-locks them.

    python bench/parking.py [--size 32768] [--cycles 3]      (needs a GPU)

A size x size `Linear` (4.3 GB of float32 at the default size) is built on the GPU.
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from harness.engine.workers.memory import Parking, held_bytes  # noqa: E402


def clock(step) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32768)
    parser.add_argument("--cycles", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/parking.py moves weights between a GPU and the host: it needs a GPU.")
    device = torch.device("cuda")
    with torch.device(device):
        model = torch.nn.Linear(args.size, args.size)
    gb = held_bytes(model) / 1e9
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}: a {gb:.2f} GB Linear")
    weight = model.weight
    for n in range(args.cycles):
        out = clock(lambda: setattr(weight, "data", weight.data.to("cpu")))
        back = clock(lambda: setattr(weight, "data", weight.data.to(device)))
        print(f"pageable, cycle {n}: to the host {out:.3f} s ({gb / out:.1f} GB/s), back {back:.3f} s "
              f"({gb / back:.1f} GB/s)")
    parking = Parking(model, device)
    for n in range(args.cycles):
        park, unpark = clock(parking.park), clock(parking.unpark)
        print(f"Parking, cycle {n}: park {park:.3f} s ({gb / park:.1f} GB/s), unpark {unpark:.3f} s "
              f"({gb / unpark:.1f} GB/s)")


if __name__ == "__main__":
    main()
