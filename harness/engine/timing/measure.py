"""The timing phase: the candidate in its worker and the reference in the reference process, timed in
turns batch by batch, every call's seed, order and stream-order probe drawn here (stages.py, beside.py);
the timed outputs re-checked; the reference timed alone in its own process and with its twins
(placement_spread); and the rules that read them: work hidden from the clock (suspected from the
clocks, confirmed by a per-stream trace) and a reference slower beside the candidate than alone.

One clock per verdict, fixed before the candidate runs: every timing that feeds a speedup, a guard or
the interval of one verdict is of the verdict's clock (EvalResult.clock); the other clock's figures are
reported apart (EvalResult.second). Work a candidate hides from the clock makes its verdict worse,
never another clock's."""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import Optional

from ...problem import ProblemError
from ...results import Clock, ClockFigures, EvalResult, Retimed, ShapeTiming, Timing, shape_label, to_dict
from ..building.builder import builds_paused
from ..checking.trials import check
from ..children import Children
from ..findings import (AtBenchmarkShape, Finding, HiddenWork, ReusedOutputs, SlowedReference, TimedOutputsDiffer,
                        TimingsForged)
from ..phases import Notify, Phase
from ..processes.child import Child
from ..processes.footprint import gb
from ..processes.protocol import (CANDIDATE_PROCESS_REFERENCE, Checked, Command, Request, StopRule,
                                  StreamsTraced)
from ..verdicts import refuse_on_guards
from ...stats import ratio_interval
from . import beside, speedups, stages
from .alone import BESIDE_AND_ALONE, Alone, Clocked

# The reference beside the candidate against the reference alone, both in the reference process: past the
# device's REST_ON_ALONE the verdict rests on the reference alone, the faster, so a slowdown gains the
# candidate nothing; on a GPU, past REJECT in SLOWDOWN_RETIMES more timings too, it is refused. No load from
# other processes excuses it there: the reference's calls run with the candidate's processes stopped, and a
# slowdown only they meet is the candidate's doing. A CPU's timings of the same call wander far more from
# one second to the next (a 0.1 ms LayerNorm's medians 0.085-0.21 ms, minutes apart on a 2-core machine,
# and twice as slow beside as alone in a busy suite, with the candidate stopped): there the verdict rests
# on the reference alone from 2x, and nothing is refused for it.
REST_ON_ALONE = {"cuda": 1.10, "cpu": 2.0}
REFERENCE_SLOWDOWN_REJECT = {"cuda": 1.5}
SLOWDOWN_RETIMES = 2
# Short of that, a reference whose time beside the candidate and alone differ beyond the noise (their
# interval leaves out 1) and by more than RETIME_GAP is timed again, both ways, once: other processes' load
# comes and goes. A gap that stays widens the verdict's interval to cover the speedup over the reference
# alone as well (speedups.widening), and the text says so in a sentence; below RETIME_GAP it only widens.
RETIME_GAP = {"cuda": 1.03, "cpu": 1.10}


@dataclass
class Measured:
    """One shape's timing: every clock's figures, beside and alone, the twins' spread on each, and the
    baselines that rest on the reference alone (unpaired with the candidate's samples)."""

    values: dict  # the shape; {} the main one
    clocked: Clocked
    spreads: dict[str, Optional[float]]
    apart: set[str] = field(default_factory=set)
    # by clock, a CPU's: where the reference ran slower in the candidate's process than in its own
    # (CANDIDATE_PROCESS_REFERENCE), the log of the gap: it widens the interval's upper end
    process: dict[str, float] = field(default_factory=dict)
    gap: float = 0.0  # on the verdict's clock: log(beside / alone) beyond the noise, after a retime (RETIME_GAP)

    def widen(self, clock: str) -> tuple[float, float]:
        return speedups.widening(self.process.get(clock, 0.0), self.gap)


class Measure:
    """Times one problem's candidates; keeps what is measured once per problem and shape."""

    def __init__(self, children: Children):
        self.children = children
        self.alone = Alone(children)

    @property
    def placement(self) -> dict[str, dict[str, Optional[float]]]:
        return self.alone.placement

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
        """The reference alone, as reference() times it, on every clock the device has, by clock: the figures
        the problem's candidates share while recent (alone.Alone.before_candidates)."""
        return self.alone.before_candidates()

    def _figures(self, result: EvalResult, measured: list[Measured]) -> None:
        """The verdict's clock into the result's own fields, the other clock beside them; the
        speedups (judge.py) divide only within each."""
        main = next((m for m in measured if not m.values), measured[0])
        shaped = bool(self.children.reference_info.benchmark_shapes)

        def on(clock: str) -> ClockFigures:
            shapes = [ShapeTiming(m.values, m.clocked[clock]["candidate"].median, m.clocked[clock]["candidate"].n,
                                  speedups.baselines(m.clocked[clock], m.spreads.get(clock) or 0.0,
                                                     m.apart if clock == result.clock else set(),
                                                     m.widen(clock) if clock == result.clock else (0.0, 0.0)))
                      for m in measured] if shaped else []
            spreads = [m.spreads[clock] for m in measured if m.spreads.get(clock) is not None]
            return ClockFigures(clock, main.clocked[clock], benchmark_shapes=shapes,
                                placement_spread=max(spreads) if spreads else None)

        verdict = on(result.clock)
        result.timings, result.benchmark_shapes = verdict.timings, verdict.benchmark_shapes
        result.placement_spread = verdict.placement_spread
        result.details["rests_on_alone"] = sorted(main.apart) or None
        if result.clock in main.process:
            result.details["process_spread"] = round(main.process[result.clock], 4)
        if main.gap:
            result.details["reference_gap"] = round(main.gap, 4)
        other = {Clock.GPU.value: Clock.LATENCY.value, Clock.LATENCY.value: Clock.GPU.value}.get(result.clock)
        if other and other in main.clocked:
            result.second = on(other)
        result.host_share = speedups.host_share(main.clocked)

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
                measured.append(replace(found, values=values))
        finally:
            if current:
                children.reference_back(deadline)
        if current:  # the CUDA graph is checked at the main shape
            children.worker_at(worker, {}, deadline)
        return measured

    def _time(self, worker: Child, result: EvalResult, shares: int = 1, shape: str = "") -> Measured:
        """The candidate and the reference timed in turns, then the reference alone, each with `shares`'
        part of the time cap. On a GPU, a reference past REJECT slower beside the candidate than alone (on the
        verdict's clock) is timed again, both ways, SLOWDOWN_RETIMES times while it stays so, and then refused;
        one past the device's REST_ON_ALONE gives the verdict the reference's time alone; a gap past RETIME_GAP
        is timed again once, and what stays of it widens the interval.
        The first time at a `shape`, the reference's twins are timed alone beside it too (placement_spread)."""
        timings, alone = self._time_once(worker, result, shares, shape)
        clock = result.clock
        device = "cpu" if self.children.options.device == "cpu" else "cuda"
        reject = REFERENCE_SLOWDOWN_REJECT.get(device, float("inf"))
        for _ in range(SLOWDOWN_RETIMES):
            if not any(_ratio(timings[clock][key], alone[clock][key]) > reject
                       for key in BESIDE_AND_ALONE if key in alone[clock]):
                break
            if result.retimed_for_slowdown is None:
                result.retimed_for_slowdown = Retimed(timings[clock]["reference"].median,
                                                      alone[clock]["reference"].median)
            # Under the same conditions: this process's builds stopped, and the reference alone timed
            # just before the candidate's timing as well as just after, the slower of the two counting,
            # so drift that comes and goes cannot fall on the candidate's side alone.
            with builds_paused():
                before = self.alone.time_reference(self.alone.rule(shares, clock), pause=[worker])
                timings, alone = self._time_once(worker, result, shares, shape, fresh=True)
            earlier = before[clock]
            alone[clock].update({key: max(earlier[key], alone[clock][key], key=lambda t: t.median)
                                 for key in BESIDE_AND_ALONE if key in earlier and key in alone[clock]})
        gap = _gap(timings[clock], alone[clock])
        if abs(gap) > math.log(RETIME_GAP[device]) and result.retimed_for_slowdown is None:
            result.details["retimed_for_gap"] = round(gap, 4)
            with builds_paused():
                timings, alone = self._time_once(worker, result, shares, shape, fresh=True)
            self.alone.keep(shape, alone)  # the newest figure alone, the candidate stopped: the problem's now
            gap = _gap(timings[clock], alone[clock])
        apart = set()
        rest = REST_ON_ALONE[device]
        for key in BESIDE_AND_ALONE:
            if key not in alone[clock]:
                continue
            near, far = timings[clock][key], alone[clock][key]
            if key == "reference":
                result.reference_alone_ms = far.median
            ratio = _ratio(near, far)
            if ratio > reject:
                raise SlowedReference(ratio, near.median, far.median)
            if ratio > rest:
                apart.add(key)
                timings[clock][key] = far
                note = (f"the reference ran {ratio:.2f}x slower beside the candidate than alone ({near.median:.4g} "
                        f"ms vs {far.median:.4g} ms): the speedup rests on the reference alone")
                if note not in result.warnings:
                    result.warnings.append(note)
        gap = 0.0 if apart else gap
        if abs(gap) > math.log(RETIME_GAP[device]):
            near, far = timings[clock]["reference"], alone[clock]["reference"]
            note = (f"this speedup is less certain than its samples alone say: the reference ran {_times(gap)} "
                    f"beside the candidate than alone ({near.median:.4g} ms vs {far.median:.4g} ms), also when "
                    "timed again, as load from other processes makes it; the interval covers the speedup over "
                    "either figure")
            if note not in result.warnings:
                result.warnings.append(note)
        process = {}
        for each, found in timings.items():  # a CPU's (protocol.CANDIDATE_PROCESS_REFERENCE): the faster stands
            here = found.pop(CANDIDATE_PROCESS_REFERENCE, None)
            if here is None or "reference" in apart:
                continue
            if here.median < found["reference"].median:  # the candidate's own process: like for like
                found["reference"] = here
                result.details["reference_timed_in"] = "the candidate's process"
            else:  # its process ran the reference slower: what that may have cost the candidate widens the top
                process[each] = math.log(here.median / found["reference"].median)
        merged = {each: {**timings[each], **{k: t for k, t in alone.get(each, {}).items() if k not in timings[each]}}
                  for each in timings}
        return Measured({}, merged, self.placement[shape], apart, process, gap)

    def _time_once(self, worker: Child, result: EvalResult, shares: int, shape: str,
                   fresh: bool = False) -> tuple[Clocked, Clocked]:
        """The candidate and the reference timed in turns, their timed outputs re-checked, and the
        reference alone: shared from an earlier candidate of the problem unless `fresh`."""
        children, o = self.children, self.children.options
        info = children.reference_info
        rule = o.stop_rule(o.time_cap / shares)
        split = result.details.setdefault("time_split_s", {})  # where the time phase's seconds went
        started = time.monotonic()
        parties = beside.parties(children, worker, rule, info.numerics_differ)
        try:
            sampled = stages.run(parties, rule, o.device != "cpu", o.scrutiny.probe_share)
        except ValueError:  # a batch that came back with other calls than it was sent
            raise TimingsForged() from None
        self._check_more(parties[0], sampled, rule)
        reply, message = beside.end(children, worker)
        _add(split, "beside", started)
        timings = sampled.clocked
        seeds = sampled.seeds.get("candidate", [])
        empty = any(t.median <= 0 for each in timings.values() for t in each.values()
                    if t.clock != Clock.ALL_STREAMS.value)
        if empty or [sample.get("seed") for sample in reply.timed] != seeds:
            raise TimingsForged()
        if reply.switches:
            note = (f"it flipped process-wide switches in its own process ({'; '.join(reply.switches)}); the "
                    "reference, in a process of its own, ran under the harness's settings")
            if note not in result.warnings:
                result.warnings.append(note)
        if sampled.reused.get("candidate") and not sampled.reused.get("reference"):
            raise ReusedOutputs(sampled.reused["candidate"], len(seeds))
        seen = ""
        if speedups.suspects_hidden_work(timings) or (o.scrutiny.trace_every and o.device != "cpu"):
            seen = self._hidden_work(worker, timings, result)
        started = time.monotonic()
        children.reference.forward(message, cmd=Command.VERIFY_TIMED.value)
        checked = children.reference_says(children.run_deadline(), Checked, "re-checking the timed outputs")
        _add(split, "recheck", started)
        result.timed_calls_checked = checked.check.trials
        if not checked.check.passed:
            probed = sampled.probed.get("candidate", [])
            failed = [i for i in checked.failed_calls if i < len(probed)]
            raise TimedOutputsDiffer(checked.check, seen, stream_order=bool(failed) and all(probed[i] for i in failed))
        if seen:
            raise HiddenWork(seen)
        # shared once the twins were timed at this shape (the first prompt's figure times none)
        shared = None if fresh or shape not in self.placement else self.alone.shared(shape, result.clock)
        if shared is not None:
            result.details["reference_alone_age_s"] = self.alone.age(shape)
            alone = shared
        else:
            started = time.monotonic()
            alone = self.alone.timed(shares, shape, result.clock, list(timings), [worker])
            _add(split, "alone", started)
            if not fresh:
                self.alone.keep(shape, alone)
        if info.parameter_bytes and None in self.placement[shape].values():
            note = (f"the reference's parameters ({gb(info.parameter_bytes)}) are too big to copy twice beside it, "
                    "so what their placement alone does to its time was not measured; the interval does not span it")
            if note not in result.warnings:
                result.warnings.append(note)
        return timings, alone

    def _check_more(self, worker: beside.Remote, sampled: stages.Sampling, rule: StopRule) -> None:
        """Where the stages stopped before the scrutiny's checked calls of the candidate's, the rest as extra
        calls on the headline's clock, their outputs re-checked with the timed ones and their times not used
        (so no cache flush before them)."""
        scrutiny = self.children.options.scrutiny
        seeds, probed = sampled.seeds.setdefault("candidate", []), sampled.probed.setdefault("candidate", [])
        short = scrutiny.checked_calls - len(seeds)
        if short <= 0:
            return
        rng = random.SystemRandom()
        on_gpu = self.children.options.device != "cpu"
        stage = stages.stages_of(on_gpu, rule.clock)[0]
        calls = [stages.Call("candidate", rng.getrandbits(63), probe=on_gpu and stage == Clock.GPU.value
                             and rng.random() < scrutiny.probe_share) for _ in range(short)]
        got = worker.batch(stage, calls, flush=False)
        if len(got.rows.get("candidate", [])) != short:
            raise TimingsForged()
        seeds += [call.seed for call in calls]
        probed += [call.probe for call in calls]
        for name, count in got.reused.items():
            sampled.reused[name] = sampled.reused.get(name, 0) + count

    def _hidden_work(self, worker: Child, timings: Clocked, result: EvalResult) -> str:
        """The clocks suspect work the caller's stream did not wait for: a trace of a few calls says on
        which streams. Confirmed, it is what the verdict names (HiddenWork, after the re-check, whose
        wrong outputs come first); not confirmed, the device's own jitter, and nothing changes. Where
        no trace can be taken, the suspicion stands as a warning."""
        tail = speedups.hidden_work_ms(timings.get(Clock.LATENCY.value, {}))
        worker.send(to_dict(Request(Command.STREAMS)))
        traced, _ = self.children.talk(worker, self.children.run_deadline(), "tracing its streams", StreamsTraced)
        refuse_on_guards(traced)
        if traced.calls and not traced.outside_ms:
            result.details["unconfirmed_tail_ms"] = tail
            return ""
        if not traced.calls:
            result.warnings.append(f"its calls seemed to leave {tail:.3g} ms of work running after the caller's "
                                   f"stream was done, and no trace could confirm it ({traced.note})")
            return ""
        result.hidden_work_ms = max(traced.outside_ms.values())
        result.hidden_streams = sorted(traced.outside_ms)
        return (f"its calls ran work on stream(s) {', '.join(result.hidden_streams)} outside their timed windows, "
                f"before the caller's stream reached the call or after it was done (a per-stream trace of "
                f"{traced.calls} calls: up to {result.hidden_work_ms:.3g} ms outside)")

def _add(split: dict[str, float], step: str, started: float) -> None:
    split[step] = round(split.get(step, 0.0) + time.monotonic() - started, 3)


def _gap(beside_: dict[str, Timing], alone: dict[str, Timing]) -> float:
    """The widest log(beside / alone) of the references timed both ways whose unpaired interval leaves out 1:
    a gap beyond the noise; 0 where none is."""
    gaps = [0.0]
    for key in BESIDE_AND_ALONE:
        near, far = beside_.get(key), alone.get(key)
        if near is None or far is None or not near.samples or not far.samples or far.median <= 0:
            continue
        low, high = ratio_interval(near.samples, far.samples, paired=False)
        if not low <= 1.0 <= high:
            gaps.append(math.log(near.median / far.median))
    return max(gaps, key=abs)


def _times(gap: float) -> str:
    return f"{math.exp(gap):.2f}x slower" if gap > 0 else f"{math.exp(-gap):.2f}x faster"


def _ratio(beside_: Timing, alone: Timing) -> float:
    """How many times slower the reference ran beside the candidate than alone."""
    return beside_.median / alone.median if alone.median > 0 else 1.0
