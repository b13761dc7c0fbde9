"""What the re-check of a timing's calls costs in the reference process, by problem: the calls'
comparisons read back once (integrity/recheck.py's verify_timed) against a read after each call
(as it was before), and the floor: the same draws and forwards with one synchronize at the end.

    PYTHONPATH=$PWD python bench/recheck_speed.py PROBLEM.py ... [--calls 15] [--out FILE.json]

The outputs re-checked are the reference's own (a faithful candidate's), sampled as the candidate's
worker samples them, so every re-check passes. Each figure is the median of five, in ms, after one
untimed pass. Prints a line per problem.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path


def measure(problem_file: str, calls: int, device_name: str) -> dict:
    import torch

    from harness.engine.workers.common import State, build_model, import_file, inputs_from_seed, sync
    from harness.integrity.recheck import SAMPLED_ELEMENTS, TimedOutputs, verify_timed
    from harness.results import as_list

    device = torch.device(device_name)
    problem = import_file(problem_file, "problem")
    model = build_model(problem.Model, list(problem.get_init_inputs()), 1, device)
    state = State(model)

    def outputs(seed: int) -> list:
        state.restore()
        with torch.no_grad():
            return as_list(model(*inputs_from_seed(problem, device, seed)))

    observed = TimedOutputs(device)
    for seed in range(calls):
        observed.observe(seed, tuple(outputs(seed)))
    samples, tensors = observed.message()
    tolerances = {"default": (1e-4, 1e-4)}

    def at_once() -> None:
        assert verify_timed(samples, tensors, outputs, tolerances)[0].passed

    def a_read_a_call() -> None:
        offsets = [0] * len(tensors)
        for sample in samples:
            counts = [min(SAMPLED_ELEMENTS, math.prod(meta["shape"])) for meta in sample["outputs"]]
            mine = [t[o:o + n] for t, o, n in zip(tensors, offsets, counts)]
            offsets = [o + n for o, n in zip(offsets, counts)]
            assert verify_timed([sample], mine, outputs, tolerances)[0].passed

    def floor() -> None:
        for seed in range(calls):
            outputs(seed)
        sync(device)

    found = {"problem": Path(problem_file).stem, "calls": calls}
    for name, step in (("at_once_ms", at_once), ("a_read_a_call_ms", a_read_a_call), ("floor_ms", floor)):
        step()
        sync(device)
        laps = []
        for _ in range(5):
            started = time.perf_counter()
            step()
            sync(device)
            laps.append((time.perf_counter() - started) * 1e3)
        found[name] = round(statistics.median(laps), 2)
    del model, state
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--calls", type=int, default=15, help="timed calls re-checked (a timing's usual count)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    missing = [each for each in args.problems if not Path(each).is_file()]
    if missing:
        sys.exit(f"bench/recheck_speed.py: problem file {missing[0]} does not exist.")
    import torch
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("bench/recheck_speed.py needs a CUDA GPU for --device cuda (the default); --device cpu runs it here.")
    rows = []
    for problem_file in args.problems:
        row = measure(problem_file, args.calls, args.device)
        rows.append(row)
        print(f"{row['problem'][:40]:40}  at once {row['at_once_ms']:8.2f} ms   a read a call "
              f"{row['a_read_a_call_ms']:8.2f} ms   draws and forwards alone {row['floor_ms']:8.2f} ms", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
