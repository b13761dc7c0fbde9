"""How busy the GPU is while a sweep runs, by what the slot was doing: where the device idles.

    PYTHONPATH=$PWD python bench/device_busy.py --out /tmp/busy -- /tmp/kb --copies --time-cap 2
    PYTHONPATH=$PWD python bench/device_busy.py --out /tmp/busy --read   # an earlier run's files again

Runs `harness sweep ARGS --out OUT` while nvidia-smi samples the GPU's utilization (the share of
time a kernel ran, NVML's figure) every 200 ms into OUT/utilization.csv, then puts each sample in
the state the slot was in at that moment, from OUT/events.jsonl: a candidate's check, its timing,
its other shapes (which a sweep runs beside the next problem's check), several at once, or none.
Prints a row a state: samples, share of the sweep's wall, mean utilization.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from statistics import mean

from rich.console import Console
from rich.table import Table

SAMPLE_MS = 200
# what each span of a candidate's events is, by the event that opens it and the one that closes it
SPANS = {"check": ("checking", "timing"), "timing": ("timing", "checking other shapes"),
         "shapes": ("checking other shapes", "correct")}


def samples(lines: list[str]) -> list[tuple[float, int]]:
    """(epoch seconds, utilization %) from nvidia-smi's `timestamp,utilization.gpu` csv lines (its
    timestamps in this host's local time); lines that are not a sample are skipped."""
    found = []
    for line in lines:
        stamp, _, util = line.partition(",")
        try:
            found.append((datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp(), int(util)))
        except ValueError:
            continue
    return found


def spans(events: list[dict], slot: str) -> list[tuple[float, float, str]]:
    """Each candidate's check, timing and other shapes on `slot`: (start, end, kind), from the first time
    the events announce the opening step to the first time they announce the closing one."""
    first: dict[str, dict[str, float]] = {}
    for event in events:
        if event.get("slot") == slot:
            who, _, doing = event["text"].partition(": ")
            first.setdefault(who, {}).setdefault(doing, event["t"])
    return [(steps[opens], steps[closes], kind) for steps in first.values()
            for kind, (opens, closes) in SPANS.items() if opens in steps and closes in steps]


def by_state(utilization: list[tuple[float, int]], found: list[tuple[float, float, str]]) -> dict[str, list[int]]:
    """The samples between the first span's start and the last one's end, by the spans open at each
    ("check+shapes": both at once; "none": between them)."""
    if not found:
        return {}
    start, end = min(s for s, _, _ in found), max(e for _, e, _ in found)
    states: dict[str, list[int]] = {}
    for t, util in utilization:
        if start <= t <= end:
            state = "+".join(sorted({kind for s, e, kind in found if s <= t < e})) or "none"
            states.setdefault(state, []).append(util)
    return states


def table(states: dict[str, list[int]]) -> Table:
    total = sum(map(len, states.values())) or 1
    shown = Table(title=f"GPU utilization by what the slot did (nvidia-smi, every {SAMPLE_MS} ms)")
    for column in ("state", "samples", "share of the wall", "mean utilization"):
        shown.add_column(column, justify="left" if column == "state" else "right")
    for state, utils in sorted(states.items(), key=lambda item: -len(item[1])):
        shown.add_row(state, str(len(utils)), f"{len(utils) / total:.0%}", f"{mean(utils):.0f}%")
    every = [u for utils in states.values() for u in utils]
    shown.add_row("all", str(len(every)), "100%", f"{mean(every):.0f}%" if every else "-")
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the sweep's output folder")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU the sweep runs on (its slot 'gpu N')")
    parser.add_argument("--read", action="store_true", help="read an earlier run's files; run nothing")
    parser.add_argument("sweep", nargs="*", help="harness sweep's arguments, after --")
    args = parser.parse_args()
    csv, log = args.out / "utilization.csv", args.out / "events.jsonl"
    if not args.read:
        if not args.sweep:
            parser.error("give harness sweep's arguments after --, or --read to read an earlier run's folder")
        if shutil.which("nvidia-smi") is None:
            sys.exit("bench/device_busy.py needs nvidia-smi, which samples the GPU's utilization; it is not on PATH.")
        args.out.mkdir(parents=True, exist_ok=True)
        with open(csv, "w") as log:
            sampler = subprocess.Popen(["nvidia-smi", "-i", str(args.gpu), "--query-gpu=timestamp,utilization.gpu",
                                        "--format=csv,noheader,nounits", "-lms", str(SAMPLE_MS)], stdout=log)
            try:
                subprocess.run([sys.executable, "-m", "harness", "sweep", *args.sweep, "--gpus", str(args.gpu),
                                "--out", str(args.out)], check=False)
            finally:
                sampler.terminate()
                sampler.wait()
    missing = [str(path) for path in (csv, log) if not path.is_file()]
    if missing:
        sys.exit(f"bench/device_busy.py: {' and '.join(missing)} not found: --out names a folder this script "
                 "filled (its sweep's events and the GPU's samples).")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    Console().print(table(by_state(samples(csv.read_text().splitlines()), spans(events, f"gpu {args.gpu}"))))


if __name__ == "__main__":
    main()
