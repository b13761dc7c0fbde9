"""From timings to the figures a user reads: the speedup over each baseline, with its interval.

The timings of one evaluation are keyed by what was timed:
  candidate, reference                  in turns, each in its own process (IEEE float32)
  reference_defaults                    beside them, under PyTorch's default float32 settings
                                        (timed only where those change the reference's outputs)
  compiled, compiled_defaults           torch.compile of the reference, alone in the reference's process
  placement_<n>                         twins of the reference, alone, their parameters at other addresses

Two instances of one model differ in where their parameters sit, and on a GPU that alone moves a
forward's time (LayerNorm's 32 MB of weights, moved: up to 1.1% on an H200). The bootstrap cannot see
it: each instance keeps its addresses for the whole timing. So the reference's twins measure it, and
every interval is widened by the range of their times (`placement_spread`), and by RESOLUTION
besides: copies of KernelBench's 200 level 1 and 2 models (H200), placement counted, missed 1.0 by
at most 0.01% beyond their bootstrap intervals (6 of 200; up to 0.06% before the twins), so
a difference under 0.1% is not one the harness can vouch for.

The headline is against the fastest way eager PyTorch runs the reference with a switch a user can
flip: the faster of its default float32 settings (which let cuDNN use TF32) and IEEE float32. TF32
is not always the faster (cuDNN's GRU is 1.6x slower with it on an H100), so a fixed choice would
flatter a candidate on some problems. torch.compile's baseline is chosen the same way. The candidate
itself is held to IEEE float32, so a copy of the reference reads 1.00x where IEEE is the faster
setting and below 1.00x where TF32 is: never above.
"""
from __future__ import annotations

import math

from typing import Optional

from ...results import Baseline, Clock, Ended, EvalResult, HostShare, ShapeTiming, Timing
from ...stats import geomean, overlap, ratio_interval

# (baseline name, numerics, timings key)
_BASELINES = (("eager", "default", "reference_defaults"), ("eager", "ieee", "reference"),
              ("torch.compile", "default", "compiled_defaults"), ("torch.compile", "ieee", "compiled"))
# beside the candidate, so sample i of each shares a round with the candidate's sample i (unless the verdict
# rests on the reference alone: Measured.apart)
_PAIRED = {"reference", "reference_defaults"}

# A candidate's tail (work finishing after the caller's stream, beyond an empty call's) past this
# share of its GPU time, plus a floor for the jitter of a synchronize, is suspected hidden work; a
# per-stream trace confirms it before a verdict rests on it.
HIDDEN_SHARE = 0.2
HIDDEN_FLOOR_MS = 0.05

# Host-bound: at least this share of a call's latency is its host path, the device idle meanwhile.
HOST_BOUND_SHARE = 0.5

# Every interval's widening beyond the bootstrap and the twins' spread, each side (relative).
RESOLUTION = 0.001


class MixedClocks(ValueError):
    """Timings of two clocks in one division: a GPU time over a latency is no speedup."""


def clock_of(timings: dict[str, Timing]) -> str:
    """The one clock of `timings`; MixedClocks where they have more than one."""
    clocks = {t.clock for t in timings.values()}
    if len(clocks) > 1:
        raise MixedClocks("timings of different clocks in one verdict: "
                          + ", ".join(f"{name} {t.clock or 'unnamed'}" for name, t in timings.items()))
    return clocks.pop() if clocks else ""


def hidden_work_ms(latency: dict[str, Timing]) -> float:
    """The candidate's time between its caller's stream finishing and the whole device finishing,
    beyond an empty call's, in ms (0 without latency samples). Host time falls before the caller's
    stream finishes, never here."""
    cand = latency.get("candidate")
    return max(cand.tail - cand.tail_overhead, 0.0) if cand else 0.0


# GPU time this far below the latency its host submission does not explain (latency less the host's part,
# less an empty call's) also asks for the trace: work that ran before the window opened, as work on a
# stream that never waits for the caller's does while the device spins before the start event.
UNEXPLAINED_SHARE = 0.5


def suspects_hidden_work(clocked: dict[str, dict[str, Timing]]) -> bool:
    """Whether the clocks disagree about the candidate's work in a way only work off the caller's stream
    explains: a tail after its stream is done, or GPU time far below the latency its host does not explain."""
    gpu, latency = clocked.get(Clock.GPU.value), clocked.get(Clock.LATENCY.value)
    if not gpu or not latency or "candidate" not in gpu or "candidate" not in latency:
        return False
    cand, lat = gpu["candidate"], latency["candidate"]
    device_part = lat.median - lat.overhead - lat.submit_median
    return (hidden_work_ms(latency) > HIDDEN_SHARE * cand.median + HIDDEN_FLOOR_MS
            or (cand.median < UNEXPLAINED_SHARE * device_part and device_part - cand.median > HIDDEN_FLOOR_MS))


def host_share(clocked: dict[str, dict[str, Timing]]) -> Optional[HostShare]:
    """Where most of the candidate's latency is its host path (launches, Python, autograd's bookkeeping)."""
    gpu, latency = clocked.get(Clock.GPU.value), clocked.get(Clock.LATENCY.value)
    if not gpu or not latency:
        return None
    g, lat = gpu["candidate"], latency["candidate"]
    if lat.submit_median >= HOST_BOUND_SHARE * lat.median:
        return HostShare(host_ms=lat.submit_median, latency_ms=lat.median, gpu_ms=g.median)
    return None


def placement_spread(reference: Timing, twins: list[Timing]) -> float:
    """How far apart placement alone puts the reference's time: |log| of the ratio between the
    fastest and the slowest median among the reference and its twins (timed in the same rounds),
    counted only where that pair's interval leaves out 1 (noise is the bootstrap's part already).
    The range, not each twin against the reference: the candidate's process holds the reference
    and the candidate at placements of their own, each anywhere in it. 0 without twins."""
    placed = [t for t in (reference, *twins) if t.median > 0]
    if len(placed) < 2:
        return 0.0
    slowest, fastest = max(placed, key=lambda t: t.median), min(placed, key=lambda t: t.median)
    low, high = ratio_interval(slowest.samples, fastest.samples, paired=True)
    return 0.0 if low <= 1.0 <= high else math.log(slowest.median / fastest.median)


def baselines(timings: dict[str, Timing], spread: float = 0.0, apart: frozenset = frozenset(),
              widen: tuple[float, float] = (0.0, 0.0)) -> list[Baseline]:
    """Every baseline timed, in `ranked` order (the headline first); each interval widened on
    both sides by `spread` (placement_spread) and RESOLUTION, and its lower and upper ends by `widen`'s
    logs too (the reference's gaps that Measure._time could not time away: widening()); those in `apart`
    (the reference alone, where the verdict rests on it) not paired with the candidate's samples."""
    clock_of(timings)  # one clock, or no division
    both = math.exp(spread + RESOLUTION)
    down, up = math.exp(widen[0]), math.exp(widen[1])
    cand = timings["candidate"]
    found = []
    keys = {key for _, _, key in _BASELINES if key in timings}
    for name, numerics, key in _BASELINES:
        if key not in timings:
            continue
        if numerics == "ieee" and f"{key}_defaults" not in keys:
            numerics = "same"  # the defaults did not change this reference: one baseline serves both
        base = timings[key]
        paired = key in _PAIRED and key not in apart
        low, high = ratio_interval(base.samples, cand.samples, paired=paired) if base.samples and cand.samples \
            else (base.median / cand.median,) * 2
        found.append(Baseline(name=name, numerics=numerics, key=key, median_ms=base.median,
                              speedup=base.median / cand.median,
                              interval=[low / both / down, high * both * up], paired=paired))
    return ranked(found)


def widening(process: float = 0.0, gap: float = 0.0) -> tuple[float, float]:
    """The logs by which a verdict's interval widens below and above, beyond the noise and placement:
    a CPU's `process` spread (the reference ran slower in the candidate's process than in its own: what
    that may have cost the candidate) raises the top; a `gap` between the reference beside the candidate
    and alone (the log of beside over alone) stretches the interval to the speedup over the reference
    alone, below where the reference ran slower beside, above where it ran faster."""
    return max(0.0, gap), process + max(0.0, -gap)


def ranked(found: list[Baseline]) -> list[Baseline]:
    """Eager's baselines, then torch.compile's, each name's faster numerics setting first (the
    lower median): the first is the headline. A tie keeps the default setting first."""
    return sorted(found, key=lambda b: (b.name != "eager", b.median_ms))


def faster_of(found: list[Baseline], baseline: Baseline) -> str:
    """How `baseline` was chosen among its name's settings, for the panel and feedback:
    "the faster of PyTorch defaults 50.3 ms and IEEE float32 32.0 ms"; "" where it had no rival."""
    rivals = [b for b in found if b.name == baseline.name]
    if len(rivals) < 2:
        return ""
    labels = {"default": "PyTorch defaults", "ieee": "IEEE float32"}
    return "the faster of " + " and ".join(f"{labels.get(b.numerics, b.numerics)} {b.median_ms:.4g} ms"
                                           for b in sorted(rivals, key=lambda b: b.numerics))


def over_shapes(shapes: list[ShapeTiming]) -> list[Baseline]:
    """Each baseline timed at every benchmark shape, as the geometric mean over the shapes: of its
    medians, so the speedup is the geometric mean of the per-shape speedups, and of each bound of
    the per-shape intervals. Averaging the log bounds is how the intervals would combine were the
    shapes' errors perfectly correlated: never narrower than independent errors give (the mean of
    half-widths bounds their root-sum-square over k), so conservative, and it needs only the
    recorded per-shape intervals."""
    keys = [b.key for b in shapes[0].baselines]
    combined = []
    for key in keys:
        each = [next((b for b in s.baselines if b.key == key), None) for s in shapes]
        if None in each:
            continue
        first = each[0]
        combined.append(Baseline(name=first.name, numerics=first.numerics, key=key,
                                 median_ms=geomean([b.median_ms for b in each]),
                                 speedup=geomean([b.speedup for b in each]),
                                 interval=[geomean([b.interval[i] for b in each]) for i in (0, 1)],
                                 paired=all(b.paired for b in each)))
    return ranked(combined)


def shown(found: list[Baseline]) -> list[Baseline]:
    """The baselines worth a line (`found` in `ranked` order): each name's faster setting, and
    the slower one only where its interval stands apart (otherwise the two are one figure,
    within the noise)."""
    kept: list[Baseline] = []
    for b in found:
        faster = next((k for k in kept if k.name == b.name), None)
        if faster is None or not overlap(b.interval, faster.interval):
            kept.append(b)
    return kept


def basis_text(result: EvalResult, each_round: bool = False) -> str:
    """How the headline was measured, in one line: clock, baseline, confidence; `each_round`: said of a run's
    every round (a chart's caption), so no one round's sample count."""
    cand = result.timings.get("candidate")
    if cand is None or not result.baselines:
        return ""
    head = result.baselines[0]
    clock = Clock(result.clock) if result.clock else (Clock.GPU if cand.on_gpu else Clock.HOST)
    placement = (f" and ±{result.placement_spread:.2%} for where the parameters sit (the reference's twins)"
                 if result.placement_spread else "")
    process = result.details.get("process_spread")
    if process:
        placement += (f", and its upper end +{process:.2%} for the candidate's process (the reference ran faster in "
                      "its own)")
    gap = result.details.get("reference_gap")
    if gap:
        placement += (f", and its {'lower' if gap > 0 else 'upper'} end {'-' if gap > 0 else '+'}{abs(gap):.2%} "
                      f"to cover the reference alone (it ran {'slower' if gap > 0 else 'faster'} beside the "
                      "candidate, beyond the noise)")
    chosen = faster_of(result.baselines, head)
    if head.key in (result.details.get("rests_on_alone") or ()):
        where = "timed alone in its own process (it ran slower beside the candidate)"
    elif result.details.get("reference_timed_in"):
        where = "interleaved, as timed in the candidate's process (faster there than in its own)"
    else:
        where = "in its own process, interleaved"
    if each_round:
        return (f"{clock.text}; over {head.label}{f' ({chosen})' if chosen else ''} {where}; the median of each "
                f"round's samples, 95% bootstrap interval, widened ±{RESOLUTION:.1%}")
    return (f"{clock.text}; over {head.label}{f' ({chosen})' if chosen else ''} {where}; median of {cand.n} "
            f"samples{stop_text(result, cand)}, 95% bootstrap interval, widened ±{RESOLUTION:.1%}{placement}")


def stop_text(result: EvalResult, timing: Timing) -> str:
    """Why the sampling stopped where it did, as a parenthesis ("" where the result does not say)."""
    if timing.ended == Ended.MET.value and result.stop:
        threshold = f" {result.stop_target:.2%}".replace(".00%", "%") if result.stop_target else ""
        return f" (until --stop {result.stop}{threshold} was met)"
    return {Ended.TIME_CAP.value: " (the time cap ended them)",
            Ended.SAMPLE_CAP.value: " (the most samples a timing takes)"}.get(timing.ended, "")
