"""What an audit costs against the fast verdict it checks: a copies sweep of a problem folder, then
`harness audit` of it, per record the fast verdict's seconds and the audit's, and the agreement.

    python bench/audit_cost.py PROBLEMS [--device cpu|cuda] [--time-cap 2] [--out DIR]

PROBLEMS is a folder of problem files or of level*/ folders of them (../shared/kernelbench on a GPU host).
Prints one JSON line per record, then the medians and the totals."""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("problems", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--time-cap", default="2")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="audit-cost-"))
    flags = ["--device", args.device, "--time-cap", args.time_cap]
    walls = {}
    for step, argv in (("sweep", ["sweep", str(args.problems), "--copies", "-o", str(out / "sweep")]),
                       ("audit", ["audit", str(out / "sweep")])):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "harness", *argv, *flags], capture_output=True, text=True)
        walls[step] = time.monotonic() - started
        if step == "sweep" and done.returncode:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
            return done.returncode
    records = json.loads((out / "sweep" / "audit.json").read_text())
    for r in records:
        print(json.dumps({"label": r["label"], "agree": r["agree"], "check": r["check"],
                          "fast_s": r["fast_seconds"], "audit_s": r["audit_seconds"],
                          "fast": r["fast_speedup"], "audit": r["audit_speedup"]}))
    ratios = [r["audit_seconds"] / r["fast_seconds"] for r in records if r["fast_seconds"]]
    print(json.dumps({"records": len(records), "agree": sum(r["agree"] for r in records),
                      "fast_median_s": statistics.median(r["fast_seconds"] or 0 for r in records),
                      "audit_median_s": statistics.median(r["audit_seconds"] for r in records),
                      "ratio_median": statistics.median(ratios) if ratios else None,
                      "sweep_wall_s": round(walls["sweep"], 1), "audit_wall_s": round(walls["audit"], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
