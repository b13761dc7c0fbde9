"""Where a model's tensors sit, and its time: the reference, copies of it built as the candidate's
worker builds a copy of Model (constructed, then the reference's values copied in), and the twins
the reference process makes (deep copies behind a pad), all timed interleaved in one process by the
harness's own loop (clock.time_interleaved: queued CUDA events, L2 flushed), in several fresh
processes. Each instance reads as a candidate would: the reference's median over its own, with a 95% interval.

    python bench/placement.py PROBLEM.py [--processes 4] [--cap 3] [--extra 6]

--extra adds that many plain deep copies of the reference, made one after another.

Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one_process(path: str, cap: float, extra: int) -> dict:
    import copy

    import torch

    from harness.engine.timing import clock
    from harness.engine.processes.protocol import StopRule
    from harness.engine.workers.common import (SameTensors, build_model, copy_parameters, import_file,
                                               randomize_parameters, settle)
    from harness.engine.workers.reference import twins
    from harness.stats import ratio_interval

    device = torch.device("cuda")
    settle(device)
    problem = import_file(path, "problem")
    init = list(problem.get_init_inputs())
    reference = build_model(problem.Model, init, 1, device)
    randomize_parameters(reference, 2)

    def copy_of_model():
        made = build_model(problem.Model, init, 3, device)
        copy_parameters(reference, made)
        return made.to(device)

    models = {"reference": reference, "copy": copy_of_model()}
    for n, twin in enumerate(twins(reference, device, 1 << 40), 1):
        models[f"twin_{n}"] = twin
    models["copy_after_twins"] = copy_of_model()
    for n in range(extra):  # more placements: plain deep copies, one after another
        models[f"deepcopy_{n + 1}"] = copy.deepcopy(reference)
    where = {name: [t.data_ptr() for t in list(m.parameters()) + list(m.buffers())] for name, m in models.items()}
    rule = StopRule(time_cap=cap, max_samples=4000)
    own = {name: clock.Entry(SameTensors(problem, device), m) for name, m in models.items()}
    shared_inputs = SameTensors(problem, device)
    shared = {name: clock.Entry(shared_inputs, m) for name, m in models.items()}
    found = {}
    for label, entries in (("own inputs", own), ("shared inputs", shared)):
        timed = clock.time_interleaved(entries, device, rule)
        ref = timed["reference"]
        found[label] = {name: [ref.median / t.median, *ratio_interval(ref.samples, t.samples)]
                        for name, t in timed.items()}
        found[label]["ms"] = ref.median
    found["where"] = {name: [p >> 20 for p in ptrs] for name, ptrs in where.items()}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--cap", type=float, default=3.0, help="seconds of sampling per timing")
    parser.add_argument("--extra", type=int, default=0, help="more deep copies, one after another")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.problem, args.cap, args.extra)))
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/placement.py needs a CUDA GPU: placement moves a GPU's times, not a CPU's.")
    if not Path(args.problem).is_file():
        sys.exit(f"bench/placement.py: problem file {args.problem} does not exist.")
    print(f"{Path(args.problem).name}: the reference's time over each instance's (median, 95% interval)")
    for n in range(args.processes):
        out = subprocess.run([sys.executable, __file__, args.problem, "--child", "--cap", str(args.cap),
                              "--extra", str(args.extra)],
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"process {n} failed: {out.stderr.strip()[-2000:]}")
        found = json.loads(out.stdout.strip().splitlines()[-1])
        where = found.pop("where")
        for label, ratios in found.items():
            ms = ratios.pop("ms")
            cells = ", ".join(f"{name} {r:.4f} [{lo:.4f}-{hi:.4f}]" for name, (r, lo, hi) in ratios.items()
                              if name != "reference")
            print(f"process {n}, {label}: reference {ms:.4g} ms; {cells}", flush=True)
        print(f"process {n}, tensors at (MiB): {where}", flush=True)


if __name__ == "__main__":
    main()
