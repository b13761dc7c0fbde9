"""The timing phase: the candidate and the reference timed beside each other in the candidate's
worker (flushed, interleaved, on each clock the device has: clock.py), the timed outputs
re-checked, the reference timed alone in its own process and with its twins (placement_spread),
and the rules that read them: hidden work off the caller's stream (suspected from the latency
clock's tail, confirmed by a per-stream trace), and a reference slowed down beside the candidate.

One clock per verdict: every timing that feeds a speedup, a guard or the interval of one verdict
is of the verdict's clock (EvalResult.clock); the other clock's figures are reported apart
(EvalResult.second)."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Optional

from ...problem import ProblemError
from ...results import Clock, ClockFigures, EvalResult, Retimed, ShapeTiming, Timing, shape_label, to_dict
from ..building.builder import builds_paused
from ..checking.trials import check
from ..children import REFERENCE_START_S, Children
from ..findings import AtBenchmarkShape, Finding, SlowedReference, TimedOutputsDiffer, TimingsForged
from ..phases import Notify, Phase
from ..processes.child import Child
from ..processes.footprint import gb, placement_budget
from ..processes.protocol import (PARK_BYTES, Checked, Command, ReferenceTimed, Reply, Request, StopRule, StreamsTraced,
                                  Timed)
from ..verdicts import Deadline, after, refuse_on_guards
from . import speedups

# references timed both beside the candidate and alone, each compared with itself
BESIDE_AND_ALONE = ("reference", "reference_defaults")
# The reference beside the candidate against the reference alone: a ratio past
# these is reported, and past the second refused (noise stays well under both).
REFERENCE_SLOWDOWN_WARN = 1.15
REFERENCE_SLOWDOWN_REJECT = 1.5
# ...and a refused slowdown must also cost this much time: sub-millisecond calls differ
# more than 1.5x between two processes on a small CPU machine (0.10 against 0.18 ms
# seen on 2 cores), far less on a GPU.
REFERENCE_SLOWDOWN_MIN_MS = {"cpu": 0.5, "cuda": 0.05}
# Timings after the first that must all show the slowdown before a refusal: a Python-loop
# reference on a shared 2-core machine has read 1.6x slower beside a harmless candidate twice
# in a row, its time alone wandering 2.8-5.0 ms from one second to the next.
SLOWDOWN_RETIMES = 2
# A reference whose time is its host's is host-bound: on a CPU always; on a GPU's clocks where its
# timed calls are at least this much host submission, both alone and beside the candidate. Load
# from other processes, power states and caches move a host's time between two processes: 1.4-1.6x
# on an H100 host with its other cores busy, 2.2x three times running on a 2-core machine with
# three times as many busy processes as cores, each on an honest candidate. So a host-bound
# reference's slowdown is refused only past HOST_BOUND_REJECT: an aten kernel overridden to sleep
# 2 ms makes a 0.05 ms call 40x slower.
HOST_BOUND_SHARE = 0.5
HOST_BOUND_REJECT = 3.0
# On a CPU, where the worker's process tree spent less than this share of the timing's wall time beyond
# its timing thread (no thread or process of the candidate's ran beside the calls), the slowdown is read
# on each call's time less its thread's wait for a CPU: other processes' load cannot convict. An honest
# candidate's reference read 8.7x slower beside it than alone in wall time with twice as many busy
# processes as cores and four test processes on a 2-core machine. A sleep the candidate slipped into
# the reference's path, or a thread of its own taking the CPU, still counts.
BACKGROUND_SHARE = 0.05
# The reference alone samples at most this long: it is the same program every time, so a longer
# cap (given for the candidate) would add seconds, not certainty.
REFERENCE_ALONE_CAP_S = 3.0
# ...and is timed once per shape, its figures shared by the problem's next candidates for this
# long (the device's clocks and temperature drift over minutes, not seconds). A slowdown is
# always judged again on fresh figures before it refuses (Measure._time).
REFERENCE_ALONE_REUSE_S = 300.0

# {clock: {what was timed: Timing}}: one timing step's figures on every clock the device has
Clocked = dict[str, dict[str, Timing]]


@dataclass
class Measured:
    """One shape's timing: every clock's figures, beside and alone, and the twins' spread on each."""

    values: dict  # the shape; {} the main one
    clocked: Clocked
    spreads: dict[str, Optional[float]]


class Measure:
    """Times one problem's candidates; keeps what is measured once per problem and shape."""

    def __init__(self, children: Children):
        self.children = children
        # by shape label ("" the main shape), then clock: placement_spread, measured once per problem and
        # shape; None: the model is too big to copy twice
        self.placement: dict[str, dict[str, Optional[float]]] = {}
        # by shape label: when the reference was last timed alone there, and what it found (shared)
        self._alone: dict[str, tuple[float, Clocked]] = {}

    def headline(self) -> str:
        """The clock a verdict is read on unless hidden work forces every stream to count."""
        if self.children.options.device == "cpu":
            return Clock.HOST.value
        return self.children.options.clock

    def candidate(self, worker: Child, result: EvalResult, notify: Notify) -> None:
        """The timing phase, at the problem's benchmark shapes where it declares some, else at its
        shape: fills the result's clock, its timings and shapes on that clock, and the other clock's."""
        result.clock = self.headline()
        options = self.children.options
        result.stop, result.stop_target = options.stop, options.stop_threshold()
        if self.children.reference_info.benchmark_shapes:
            measured = self._at_benchmark_shapes(worker, result, notify)
        else:
            with self.children.holding_device(Phase.TIME.doing, notify, result):
                measured = [self._time(worker, result, shape="")]
        self._figures(result, measured)

    def reference(self) -> Timing:
        """The reference alone under the faster numerics setting, before any candidate, on the headline
        clock: its time for a run's first prompt and the ceiling a run can reach. Holds the device's lock."""
        return self.reference_clocks()[self.headline()]

    def reference_clocks(self) -> dict[str, Timing]:
        """The reference alone, as reference() times it, on every clock the device has, by clock."""
        children = self.children
        children.start_reference()
        numerics = children.reference_info.numerics_differ
        with children.device_lock():
            rule = self._alone_rule()
            children.reference.send(to_dict(Request(Command.TIME_REFERENCE, rule=rule, default_numerics=numerics)))
            timings = children.reference_says(self._timing_deadline(rule), ReferenceTimed,
                                              "timing the reference before the first candidate").timings
        # each clock's baseline: the faster numerics setting (speedups.ranked)
        return {clock: min((by_key[key] for key in BESIDE_AND_ALONE if key in by_key), key=lambda t: t.median)
                for clock, by_key in timings.items() if any(key in by_key for key in BESIDE_AND_ALONE)}

    def _figures(self, result: EvalResult, measured: list[Measured]) -> None:
        """The verdict's clock into the result's own fields, the other clock beside them; the
        speedups (judge.py) divide only within each."""
        main = next((m for m in measured if not m.values), measured[0])
        shaped = bool(self.children.reference_info.benchmark_shapes)

        def on(clock: str) -> ClockFigures:
            shapes = [ShapeTiming(m.values, m.clocked[clock]["candidate"].median, m.clocked[clock]["candidate"].n,
                                  speedups.baselines(m.clocked[clock], m.spreads.get(clock) or 0.0))
                      for m in measured] if shaped else []
            spreads = [m.spreads[clock] for m in measured if m.spreads.get(clock) is not None]
            return ClockFigures(clock, main.clocked[clock], benchmark_shapes=shapes,
                                placement_spread=max(spreads) if spreads else None)

        verdict = on(result.clock)
        result.timings, result.benchmark_shapes = verdict.timings, verdict.benchmark_shapes
        result.placement_spread = verdict.placement_spread
        # a second clock only where the verdict's counts what it does: GPU time and latency both miss hidden work
        other = {Clock.GPU.value: Clock.LATENCY.value, Clock.LATENCY.value: Clock.GPU.value}.get(result.clock)
        if other and other in main.clocked:
            result.second = on(other)
        result.host_share = speedups.host_share(main.clocked) if not result.hidden_work_ms else None

    def _at_benchmark_shapes(self, worker: Child, result: EvalResult, notify: Notify) -> list[Measured]:
        """Candidate and reference timed at each benchmark shape the problem declares, both models
        rebuilt there, each shape with its share of the time cap. The candidate is checked at a
        shape before it is timed there: a time for wrong outputs means nothing, so a failure there
        is its verdict."""
        children = self.children
        shapes = children.reference_info.benchmark_shapes
        measured: list[Measured] = []
        current: dict = {}  # the shape both processes are at
        deadline = children.run_deadline()
        try:
            for values in shapes:
                label = shape_label(values)
                deadline = children.run_deadline()
                said = len(result.warnings)
                try:
                    if values != current:
                        ready = children.reference_at(values, deadline)
                        current = values if ready.applied else {}
                        if not ready.applied:
                            raise ProblemError(f"Problem file {children.problem.path}: get_benchmark_shapes() lists "
                                               f"{label}, where {ready.reason}. List only shapes the reference "
                                               "runs at.")
                        children.worker_at(worker, values, deadline)
                        if values:  # the main shape was checked first
                            check(children, worker, min(2, children.options.trials), result.warnings, deadline)
                    notify(f"timing at {label}")
                    with children.holding_device(Phase.TIME.doing, notify, result):
                        found = self._time(worker, result, shares=len(shapes), shape=label)
                except Finding as found:  # wrong outputs here are its failure: their time would mean nothing
                    if measured:  # the shapes timed before it stay on record
                        self._figures(result, measured)
                    raise AtBenchmarkShape(label, found) from None
                result.warnings[said:] = [f"at benchmark shape {label}: {w}" for w in result.warnings[said:]]
                measured.append(Measured(values, found.clocked, found.spreads))
        finally:
            if current:
                children.reference_back(deadline)
        if current:  # the CUDA graph is checked at the main shape
            children.worker_at(worker, {}, deadline)
        return measured

    def _time(self, worker: Child, result: EvalResult, shares: int = 1, shape: str = "") -> Measured:
        """Candidate and reference beside each other in the worker, then the reference alone, each
        with `shares`' part of the time cap. A reference much slower beside the candidate (on the
        verdict's clock) is timed again, both ways, before the candidate is refused: load from
        elsewhere comes and goes, a candidate that slows the reference down does so every time. The
        first time at a `shape`, the reference's twins are timed alone beside it too (placement_spread)."""
        timings, alone = self._time_once(worker, result, shares, shape)
        for _ in range(SLOWDOWN_RETIMES):
            clock = result.clock
            if not any(self._slowed_down(timings[clock][key], alone[clock][key], result)
                       for key in BESIDE_AND_ALONE if key in alone[clock]):
                break
            if result.retimed_for_slowdown is None:
                result.retimed_for_slowdown = Retimed(timings[clock]["reference"].median,
                                                      alone[clock]["reference"].median)
            # Under the same conditions: this process's builds stopped, and the reference alone timed
            # just before the candidate's timing as well as just after, the slower of the two counting,
            # so load that comes and goes cannot fall on the candidate's side alone.
            with builds_paused():
                before = self._reference_alone(shares, clock=clock)
                timings, alone = self._time_once(worker, result, shares, shape, fresh=True)
            for each in before.keys() & alone.keys():  # none in common where hidden work moved the verdict's clock
                earlier = before[each]
                alone[each].update({key: max(earlier[key], alone[each][key], key=lambda t: t.median)
                                    for key in BESIDE_AND_ALONE if key in earlier and key in alone[each]})
        clock = result.clock
        for key in BESIDE_AND_ALONE:
            if key in alone[clock]:
                self._compare_reference(timings[clock][key], alone[clock][key], result)
        merged = {each: {**timings[each], **{k: t for k, t in alone.get(each, {}).items() if k not in timings[each]}}
                  for each in timings}
        return Measured({}, merged, self.placement[shape])

    def _time_once(self, worker: Child, result: EvalResult, shares: int, shape: str,
                   fresh: bool = False) -> tuple[Clocked, Clocked]:
        """The candidate and the reference beside each other, their timed outputs re-checked, and the
        reference alone: shared from an earlier candidate of the problem unless `fresh`."""
        children, o = self.children, self.children.options
        info = children.reference_info
        rule = o.stop_rule(o.time_cap / shares)
        numerics = info.numerics_differ
        if info.parameter_bytes >= PARK_BYTES:  # the reference's weights leave the device to the worker
            children.reference.send(to_dict(Request(Command.PARK)))
            children.reference_says(children.run_deadline(), Reply, "moving the reference's parameters to the host")
        split = result.details.setdefault("time_split_s", {})  # where the time phase's seconds went
        started = time.monotonic()
        worker.send(to_dict(Request(Command.TIME, rule=rule, default_numerics=numerics)))
        reply, message = children.talk(worker, self._timing_deadline(rule), "being timed", Timed, raw=True)
        _add(split, "beside", started)
        refuse_on_guards(reply)
        timings = reply.timings
        result.details["background_cpu_share"] = reply.background_cpu_share
        # every stage observed its calls; the every-stream clock reads the latency stage's samples again
        observed = [each["candidate"] for clock, each in timings.items()
                    if clock != Clock.ALL_STREAMS.value and "candidate" in each]
        if not observed or any("reference" not in each for each in timings.values()) \
                or len(reply.timed) != sum(t.n for t in observed) or any(t.median <= 0 for t in observed):
            raise TimingsForged()
        if reply.switches:
            note = (f"it flipped process-wide switches ({'; '.join(reply.switches)}); the reference beside it ran "
                    "under the harness's own settings")
            if note not in result.warnings:
                result.warnings.append(note)
        seen = ""
        if result.clock != Clock.ALL_STREAMS.value and speedups.suspects_hidden_work(timings):
            seen = self._hidden_work(worker, timings, result)
        started = time.monotonic()
        children.reference.forward(message, cmd=Command.VERIFY_TIMED.value)
        checked = children.reference_says(children.run_deadline(), Checked, "re-checking the timed outputs").check
        _add(split, "recheck", started)
        result.timed_calls_checked = checked.trials
        if not checked.passed:
            raise TimedOutputsDiffer(checked, seen)
        kept = self._alone.get(shape)
        if kept and not fresh and result.clock in kept[1] and time.monotonic() - kept[0] < REFERENCE_ALONE_REUSE_S:
            result.details["reference_alone_age_s"] = round(time.monotonic() - kept[0], 1)
            alone = {clock: dict(each) for clock, each in kept[1].items()}
        else:
            started = time.monotonic()
            alone = self._time_alone(shares, shape, result.clock, list(timings))
            _add(split, "alone", started)
            if not fresh:
                self._alone[shape] = (time.monotonic(), {clock: dict(each) for clock, each in alone.items()})
        if info.parameter_bytes and None in self.placement[shape].values():
            note = (f"the reference's parameters ({gb(info.parameter_bytes)}) are too big to copy twice beside it, "
                    "so what their placement alone does to its time was not measured; the interval does not span it")
            if note not in result.warnings:
                result.warnings.append(note)
        return timings, alone

    def _time_alone(self, shares: int, shape: str, clock: str, clocks: list[str]) -> Clocked:
        """The reference alone in its own process on the verdict's `clock` (every clock where a compiled
        reference is asked), and the first time at a shape its twins (placement_spread), whose spread
        every clock of `clocks` takes where it was not timed alone: placement moves the device's work,
        which each clock times."""
        info = self.children.reference_info
        measure = shape not in self.placement
        alone = self._reference_alone(shares, self.children.options.compile_baseline,
                                      placement_budget(info) if measure else 0, clock)
        twins = {each: [timed.pop(key) for key in [key for key in timed if key.startswith("placement_")]]
                 for each, timed in alone.items()}
        if measure:
            # no twins of a model that holds tensors: too big to copy twice, the spread is not known
            unmeasured = not any(twins.values()) and info.parameter_bytes
            spreads = {each: None if unmeasured else speedups.placement_spread(alone[each]["reference"], twins[each])
                       for each in alone}
            self.placement[shape] = {each: spreads.get(each, spreads[clock]) for each in {*clocks, *spreads}}
        return alone

    def _hidden_work(self, worker: Child, timings: Clocked, result: EvalResult) -> str:
        """The latency clock saw the device finish well after the caller's stream: a trace of a few
        calls says on which streams. Confirmed (or where no trace can be taken), the verdict counts
        every stream; returns what was seen, for the messages. Not confirmed, the tail was the
        device's own jitter, and nothing changes."""
        tail = speedups.hidden_work_ms(timings[Clock.LATENCY.value])
        worker.send(to_dict(Request(Command.STREAMS)))
        traced, _ = self.children.talk(worker, self.children.run_deadline(), "tracing its streams", StreamsTraced)
        refuse_on_guards(traced)
        if traced.calls and not traced.late_ms:
            result.details["unconfirmed_tail_ms"] = tail
            return ""
        result.clock = Clock.ALL_STREAMS.value
        result.hidden_work_ms = tail
        result.hidden_streams = sorted(traced.late_ms)
        where = (f"on stream(s) {', '.join(result.hidden_streams)} (a per-stream trace of {traced.calls} calls: up to "
                 f"{max(traced.late_ms.values()):.3g} ms past the caller's stream)" if traced.late_ms
                 else f"where no trace could confirm it ({traced.note})")
        seen = (f"its calls left {tail:.3g} ms of work running after the caller's stream was done, {where}")
        result.warnings.append(f"{seen}; every timing of this verdict counts the whole device (latency, every stream)")
        return seen

    def _reference_alone(self, shares: int, compile_baseline: bool = False, twin_budget: int = 0,
                         clock: Optional[str] = None) -> Clocked:
        """The reference alone, at each numerics setting the candidate's timing has; the compiled reference
        and the twins only where asked; on `clock` only where given (_alone_rule)."""
        children = self.children
        rule = self._alone_rule(shares, clock)
        children.reference.send(to_dict(Request(Command.TIME_REFERENCE, rule=rule, compile_baseline=compile_baseline,
                                                default_numerics=children.reference_info.numerics_differ,
                                                placement_budget=twin_budget)))
        alone = children.reference_says(self._timing_deadline(rule), ReferenceTimed, "timing the reference alone")
        return alone.timings

    def _alone_rule(self, shares: int = 1, clock: Optional[str] = None) -> StopRule:
        """Sampling the reference alone: every clock the device has, or where a verdict's `clock` is
        given, that clock's stage only (the every-stream clock is the latency stage's) after fewer samples
        (StopRule.fewer_samples), unless a compiled reference is timed (its baselines are reported on both
        clocks, with intervals of their own). The slowdown is judged on the verdict's clock, and the other
        clock's figures take nothing from the reference alone but the compiled reference's. Fewer samples
        suffice: the slowdown is read against thresholds far above the noise, the twins' spread counts only
        where it stands out of theirs (speedups.placement_spread), and the candidate's own interval is the
        beside stage's."""
        o = self.children.options
        rule = o.stop_rule(min(o.time_cap, REFERENCE_ALONE_CAP_S) / shares)
        if clock is None or o.compile_baseline:
            return rule
        stage = Clock.LATENCY.value if clock == Clock.ALL_STREAMS.value else clock
        return replace(rule, clock=stage, second_clock=False, min_samples=rule.fewer_samples())

    def _timing_deadline(self, rule: StopRule) -> Deadline:
        """A timing step: the sampling its time cap allows, then a run timeout, which bounds a call
        (the cap is looked at between batches of calls), and torch.compile's compile where asked."""
        o = self.children.options
        extra = REFERENCE_START_S if o.compile_baseline else 0.0
        return after(rule.time_cap + o.run_timeout + extra,
                     f"its time cap's {rule.time_cap:.3g} s of sampling, then the run timeout of {o.run_timeout:.0f} s"
                     + (" and the reference's start limit for torch.compile" if extra else ""))

    def _load_excused(self, beside: Timing, alone: Timing, result: EvalResult) -> bool:
        """On a CPU, the candidate ran nothing beside its calls (BACKGROUND_SHARE) and both timings know
        their waits for a CPU: a slowdown is read without them."""
        share = result.details.get("background_cpu_share")
        return (self.children.options.device == "cpu" and share is not None and share < BACKGROUND_SHARE
                and bool(beside.unloaded_median and alone.unloaded_median))

    def _judged(self, beside: Timing, alone: Timing, result: EvalResult) -> tuple[float, float]:
        """The two times a slowdown is read on (ms): less the waits for a CPU where load is excused."""
        if self._load_excused(beside, alone, result):
            return beside.unloaded_median, alone.unloaded_median
        return beside.median, alone.median

    def _slowed_down(self, beside: Timing, alone: Timing, result: EvalResult) -> bool:
        """Past the refusal threshold (a host-bound reference's own), both as a ratio and in time."""
        floor = REFERENCE_SLOWDOWN_MIN_MS["cpu" if self.children.options.device == "cpu" else "cuda"]
        limit = HOST_BOUND_REJECT if host_bound(beside, alone) else REFERENCE_SLOWDOWN_REJECT
        beside_ms, alone_ms = self._judged(beside, alone, result)
        return beside_ms / alone_ms > limit and beside_ms - alone_ms > floor if alone_ms > 0 else False

    def _compare_reference(self, beside: Timing, alone: Timing, result: EvalResult) -> None:
        """The reference timed beside the candidate must run about as fast as alone."""
        result.reference_alone_ms = alone.median
        ratio = slowdown(beside, alone)
        if self._slowed_down(beside, alone, result):
            beside_ms, alone_ms = self._judged(beside, alone, result)
            raise SlowedReference(beside_ms / alone_ms, beside_ms, alone_ms)
        if ratio > REFERENCE_SLOWDOWN_WARN:
            host = (f"; its time is the host's, which load from other processes moves: refused only past "
                    f"{HOST_BOUND_REJECT:g}x" if host_bound(beside, alone) else "")
            if self._load_excused(beside, alone, result):
                host += (f"; less its waits for a CPU, {beside.unloaded_median:.4g} ms vs {alone.unloaded_median:.4g} "
                         "ms, and no thread or process of the candidate's ran beside its calls: other processes' "
                         "load, not refused")
            result.warnings.append(f"the reference ran {ratio:.2f}x slower beside the candidate than alone "
                                   f"({beside.median:.4g} ms vs {alone.median:.4g} ms){host}")


def _add(split: dict[str, float], step: str, started: float) -> None:
    split[step] = round(split.get(step, 0.0) + time.monotonic() - started, 3)


def host_bound(*timings: Timing) -> bool:
    """Each the host's time: a CPU's, or mostly the host's submission of the calls (HOST_BOUND_SHARE)."""
    return all(not t.on_gpu or t.submit_median >= HOST_BOUND_SHARE * t.median for t in timings)


def slowdown(beside: Timing, alone: Timing) -> float:
    """How many times slower the reference ran beside the candidate than alone."""
    return beside.median / alone.median if alone.median > 0 else 1.0
