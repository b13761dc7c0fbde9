"""What the judge's invariants do to honest kernels and to the attacks they exist for, one JSON line per
evaluation: the shipped kernels (kernels/), the honest controls that use streams, CUDA graphs and the host
(tests/candidates/), and the candidates of tests/adversarial/ written for them.

    python bench/invariants.py [--device cuda] [--only kernels controls attacks] [--time-cap 4] [--out FILE]

Run it with another harness first on PYTHONPATH (an older tree's) to read the same files before and after
a change, on one card: each line names the job, the verdict, the speedup over eager with its interval, the
clock, the sample count, the candidate's and the reference's medians, and the numerics check's figures
where the harness has one. Every kernel builds at once first; then each job is checked and timed in turn.
"""
import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
try:  # a harness already on the path (another tree's, to read before and after) is the one measured
    import harness  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO))

from harness import EvalOptions, Evaluator, evaluate_batch, to_dict  # noqa: E402

PROBLEMS, TESTS = REPO / "problems", REPO / "tests"
SMALL, MATMUL_MEAN = TESTS / "problems" / "small_layernorm.py", TESTS / "problems" / "matmul_mean.py"
CONTROLS = ["two_streams_joined", "graph_wrapper", "autograd_function", "waited_side_stream", "host_busy"]
ATTACKS = {SMALL: ["side_stream_unwaited", "side_stream_in_spin", "side_stream", "hides_tail", "global_pre_hook",
                   "misaligned_input", "swaps_input_class", "replaces_random_seed", "replaces_urandom",
                   "reuses_output"],
           MATMUL_MEAN: ["bf16_gemm_mean", "half_addmm_mean", "triton_tf32_dot"]}


def jobs(groups: list[str]) -> list[tuple[str, Path, Path]]:
    found = []
    if "kernels" in groups:
        found += [("kernels", p, REPO / "kernels" / p.name) for p in sorted(PROBLEMS.glob("*.py"))
                  if (REPO / "kernels" / p.name).exists()]
    if "controls" in groups:
        found += [("controls", SMALL, TESTS / "candidates" / f"{name}.py") for name in CONTROLS]
    if "attacks" in groups:
        found += [("attacks", problem, TESTS / "adversarial" / f"{name}.py") for problem, names in ATTACKS.items()
                  for name in names]
    return found


def line(group: str, problem: Path, candidate: Path, result) -> dict:
    timings = result.timings or {}
    check = to_dict(result.check) if result.check else {}
    return {"group": group, "problem": problem.stem, "candidate": candidate.stem, "verdict": result.verdict.value,
            "speedup": result.speedup, "interval": result.speedup_interval, "clock": result.clock,
            "n": timings["candidate"].n if "candidate" in timings else None,
            "candidate_ms": timings["candidate"].median if "candidate" in timings else None,
            "reference_ms": timings["reference"].median if "reference" in timings else None,
            "precision": check.get("precision"), "seconds": round(result.seconds, 1),
            "why": result.explanation[:300]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", nargs="*", default=["kernels", "controls", "attacks"])
    parser.add_argument("--time-cap", type=float, default=4.0)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="also append each line to this file")
    args = parser.parse_args()
    options = EvalOptions(device=args.device, cache_dir=args.cache_dir, time_cap=args.time_cap)
    todo = jobs(args.only)

    def build(job) -> None:
        try:
            Evaluator(job[1], options).build(job[2])
        except Exception:  # noqa: BLE001 - the evaluation reports it
            pass
    with ThreadPoolExecutor(max_workers=8) as builders:
        list(builders.map(build, todo))
    for group, problem, candidate in todo:
        try:
            [result] = evaluate_batch(problem, [candidate], options)
            found = line(group, problem, candidate, result)
        except Exception as exc:  # noqa: BLE001 - one broken job leaves the others standing
            found = {"group": group, "problem": problem.stem, "candidate": candidate.stem,
                     "error": f"{type(exc).__name__}: {exc}"[:300]}
        text = json.dumps(found)
        print(text, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(text + "\n")


if __name__ == "__main__":
    main()
