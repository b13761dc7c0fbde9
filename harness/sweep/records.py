"""A sweep's results on disk: one JSON line per evaluation, appended and synced as each
finishes, so a killed sweep loses at most what was in flight."""
from __future__ import annotations

import csv
import json
import os
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

from ..degenerate import tags
from ..engine.processes.footprint import in_process_need
from ..engine.processes.protocol import ReferenceReady
from ..results import EvalResult, from_dict, to_dict
from .jobs import Job, SuiteError

RESULTS_FILE = "results.jsonl"
EVENTS_FILE = "events.jsonl"
# Not a candidate's verdict: the problem file itself could not be loaded or run.
PROBLEM_ERROR = "problem_error"
# Under --backward, a problem whose outputs have no gradient (argmax): nothing to check, not a failure.
SKIPPED = "skipped"
NOT_EVALUATED = (PROBLEM_ERROR, SKIPPED)
EXPLANATION_HEAD = 300


@dataclass
class SweepRecord:
    problem: str  # the problem file's stem
    level: str
    candidate: str  # the job's label
    sample: int
    verdict: str  # a Verdict's value, PROBLEM_ERROR or SKIPPED
    speedup: Optional[float] = None  # over eager PyTorch, the faster numerics setting (`numerics`)
    speedup_compile: Optional[float] = None  # over torch.compile of the reference (its faster setting), where timed
    interval: Optional[list[float]] = None  # 95%, of `speedup`
    seconds: float = 0.0
    explanation: str = ""  # its head
    # over eager in IEEE float32, where PyTorch's defaults (TF32 convolutions) changed the reference
    speedup_ieee: Optional[float] = None
    interval_ieee: Optional[list[float]] = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds by phase (build, start, check, time, ...)
    # peak bytes by process ("reference", "candidate_worker"): "host", and on a GPU "gpu" (allocated)
    # and "device_used" (the whole device, as that process last saw it)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    # bytes: "inputs", "outputs", "workspace", "parameters", "in_process_need"
    sizes: dict[str, int] = field(default_factory=dict)
    placement_spread: Optional[float] = None  # EvalResult.placement_spread: the intervals span it
    # the headline's numerics setting: "default", "ieee", or "same" (the defaults change nothing); "" before
    numerics: str = ""
    # over eager under PyTorch's default settings, where they changed the reference
    speedup_defaults: Optional[float] = None
    interval_defaults: Optional[list[float]] = None
    tolerance: Optional[list[float]] = None  # float32's (atol, rtol) as checked (EvalResult.tolerance)
    backward: bool = False  # forward and backward checked and timed (EvalResult.backward); --resume keeps it
    clock: str = ""  # the clock of `speedup` (EvalResult.clock); "" before clocks were named
    # the other clock's headline speedup and interval (EvalResult.second): latency beside GPU time, or the reverse
    second_clock: str = ""
    speedup_second: Optional[float] = None
    interval_second: Optional[list[float]] = None
    # the stopping criterion the timings sampled under (EvalResult.stop), and why the candidate's
    # headline timing stopped (Timing.ended: met, time_cap, sample_cap); "" where it was not timed
    stop: str = ""
    ended: str = ""
    samples: int = 0  # the candidate's headline samples
    # the time phase's seconds by step: "beside" (candidate and reference interleaved, every clock),
    # "recheck" (the timed outputs compared), "alone" (the reference alone, where not shared)
    time_split: dict[str, float] = field(default_factory=dict)
    # the problem's reference process loading it, by step (ReferenceReady.load_seconds), once for its candidates
    reference_load: dict[str, float] = field(default_factory=dict)
    built_on: str = ""  # under --ray, the node whose cores built the candidate ("" on one host)
    # seconds the harness waited on its children's replies, by step (Children.waits): start, check, time and
    # shapes split finer than `phases`; a timing's waits for the device apart (children.DEVICE_WAITS)
    waits: dict[str, float] = field(default_factory=dict)
    # the check's trials run again, their outputs read other than the worker summed them (CheckResult.read_again)
    read_again: int = 0
    # the reference's own doubts (Measure._time): why it was timed again ("gap", "slowdown" or ""), the log of
    # beside over alone that stayed after it (the interval covers it), whether the verdict rests on it alone
    retimed: str = ""
    reference_gap: Optional[float] = None
    rests_on_alone: bool = False
    # a corpus case's (harness sweep --adversarial): the invariant it tests, the expectation it was held to,
    # and whether its verdict met it (None for a candidate that is no case)
    invariant: str = ""
    expected: str = ""
    caught: Optional[bool] = None
    # why the problem's speedups measure nothing (degenerate.tags: "constant (1)", ...); "" for a problem that is
    # not degenerate. The summary leaves such records out of fast_p and the geometric mean, and lists them apart
    degenerate: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.level, self.problem, self.candidate)

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"


def sizes_of(ready: Optional[ReferenceReady]) -> dict[str, int]:
    """A problem's sizes in bytes, as its reference process found them, beside what an in-process
    evaluation holds; {} where the reference never got ready."""
    if not (ready and ready.ready):
        return {}
    return {"inputs": ready.input_bytes, "outputs": ready.output_bytes, "workspace": ready.workspace_bytes,
            "parameters": ready.parameter_bytes, "in_process_need": in_process_need(ready)}


def record_of(job: Job, result: EvalResult, ready: Optional[ReferenceReady] = None) -> SweepRecord:
    """`ready`: what the problem's reference process said, for the sizes beside the peaks."""
    compiled = next((b for b in result.baselines if b.name == "torch.compile"), None)  # its faster setting
    ieee = next((b for b in result.baselines if (b.name, b.numerics) == ("eager", "ieee")), None)
    defaults = next((b for b in result.baselines if (b.name, b.numerics) == ("eager", "default")), None)
    second = result.second if result.second and result.second.baselines else None
    timed = result.timings.get("candidate")
    return SweepRecord(job.problem.stem, job.level, job.label, job.sample, result.verdict.value,
                       result.speedup, compiled.speedup if compiled else None, result.speedup_interval,
                       round(result.seconds, 3), result.explanation[:EXPLANATION_HEAD],
                       ieee.speedup if ieee else None, ieee.interval if ieee else None,
                       {name: round(seconds, 3) for name, seconds in result.phase_seconds.items()},
                       result.details.get("peak_memory", {}), sizes_of(ready), result.placement_spread,
                       result.baselines[0].numerics if result.baselines else "",
                       defaults.speedup if defaults else None, defaults.interval if defaults else None,
                       result.tolerance, result.backward, result.clock,
                       second.clock if second else "", second.speedup if second else None,
                       second.interval if second else None, result.stop,
                       timed.ended if timed else "", timed.n if timed else 0,
                       dict(result.details.get("time_split_s", {})),
                       dict(ready.load_seconds) if ready and ready.ready else {},
                       waits=dict(result.details.get("waits_s", {})),
                       read_again=result.check.read_again if result.check else 0,
                       retimed="slowdown" if result.retimed_for_slowdown else "gap" * ("retimed_for_gap" in result.details),
                       reference_gap=result.details.get("reference_gap"),
                       rests_on_alone=bool(result.details.get("rests_on_alone")),
                       # the reference process's finding where the result has none (its build failed first)
                       degenerate=tags(result.problem_degenerate or (ready.degenerate if ready else [])),
                       **_case_fields(job, result))


def _case_fields(job: Job, result: Optional[EvalResult]) -> dict:
    """A corpus case's invariant, expectation and whether `result` met it (None: its problem failed)."""
    if job.case is None or job.expect is None:
        return {}
    return {"invariant": job.case.invariant, "expected": str(job.expect),
            "caught": result is not None and job.expect.met(result)}


def problem_failure(job: Job, explanation: str, seconds: float = 0.0, skipped: bool = False) -> SweepRecord:
    """The record of a candidate whose problem failed itself, or (`skipped`) has no backward to check."""
    return SweepRecord(job.problem.stem, job.level, job.label, job.sample, SKIPPED if skipped else PROBLEM_ERROR,
                       seconds=round(seconds, 3), explanation=explanation[:EXPLANATION_HEAD], backward=skipped,
                       **_case_fields(job, None))


class ResultLog:
    """results.jsonl: read on open (a line cut short by a kill is dropped), appended to one
    synced line at a time (one write of the whole line, so lines never interleave)."""

    def __init__(self, directory: Path, resume: bool):
        self.path = directory / RESULTS_FILE
        if self.path.exists() and not resume:
            raise SuiteError(f"Sweep directory {directory} already holds {RESULTS_FILE}: give --resume {directory} "
                             "to carry it on, or another --out.")
        directory.mkdir(parents=True, exist_ok=True)
        self.records = read_records(self.path) if self.path.exists() else []
        if self.path.exists():
            _cut_partial_line(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, record: SweepRecord) -> None:
        os.write(self._fd, (json.dumps(to_dict(record)) + "\n").encode())
        os.fsync(self._fd)
        self.records.append(record)

    def close(self) -> None:
        os.close(self._fd)


class EventLog:
    """events.jsonl beside the results: each step a slot announces, with its wall-clock time, so
    where a sweep's seconds went between the recorded phases (a reference loading, a problem's
    processes ending) can be read afterwards. Appended, never synced: it explains, the results count."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self._file = open(directory / EVENTS_FILE, "a", buffering=1)
        self._lock = threading.Lock()

    def append(self, slot: str, text: str) -> None:
        with self._lock:
            if not self._file.closed:  # an interrupted sweep's slots may still announce a step as it ends
                self._file.write(json.dumps({"t": round(time.time(), 3), "slot": slot, "text": text}) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _cut_partial_line(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def read_records(path: Path) -> list[SweepRecord]:
    """Every whole line of a results file; a last line without its newline was cut by a kill."""
    try:
        lines = path.read_text().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"Sweep results {path} cannot be read: {exc}.") from None
    records = []
    for n, line in enumerate(lines[:-1], 1):  # the piece after the last newline is empty or partial
        try:
            records.append(from_dict(SweepRecord, json.loads(line)))
        except (ValueError, TypeError) as exc:
            raise SuiteError(f"Sweep results {path}, line {n}, is not a sweep record ({exc}); the file was "
                             "edited or damaged: move it aside to start the sweep afresh.") from None
    return records


def write_csv(records: list[SweepRecord], path: Path) -> None:
    names = [f.name for f in fields(SweepRecord)]
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(names)
        for record in records:
            row = to_dict(record)
            writer.writerow([_cell(row[n]) for n in names])


def _cell(value) -> str:
    """A CSV cell: intervals as "low high", phases as "name=seconds ...", peaks as "process=(host=… gpu=…) ..."."""
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(f"{v:.4g}" for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}=({_cell(v)})" if isinstance(v, dict) else f"{k}={v:.4g}" for k, v in value.items())
    return value
