"""One clock per verdict: GPU time and latency kept apart, host latency never read as hidden work,
hidden work confirmed by a per-stream trace, and the judge refusing to divide across clocks."""
import contextlib
import dataclasses
import math
import random
import statistics
from types import SimpleNamespace
from typing import Optional

import pytest
import torch

from conftest import CANDIDATES, PROBLEMS
from harness import EvalResult, Timing, Verdict, evaluate, from_dict, from_json, to_json
from harness.loop.feedback import warning_lines
from harness.engine.timing import clock as timing
from harness.engine.timing import beside, speedups, stages
from harness.engine.profiling import torch_trace
from harness.engine.judge import judge
from harness.engine.timing.measure import Measure
from harness.engine.options import EvalOptions
from harness.engine.findings import Finding
from harness.engine.verdicts import judged
from harness.engine.processes.protocol import (Checked, ReferenceReady, ReferenceTimed, Request, StopRule,
                                               StreamsTraced, Timed)
from harness.results import CheckResult, Clock

GPU, LATENCY, ALL, HOST = Clock.GPU.value, Clock.LATENCY.value, Clock.ALL_STREAMS.value, Clock.HOST.value


def timing_of(median: float, submit: float = 0.0, tail: float = 0.01, *, clock: str, n: int = 40,
              tail_overhead: float = 0.01, spread: float = 0.002, seed: int = 0) -> Timing:
    rng = random.Random(seed)
    samples = [median * (1 + rng.gauss(0, spread)) for _ in range(n)]
    return Timing(median=statistics.median(samples), iqr=0.0, mean=median, min=min(samples), n=n, rel_se=0.001,
                  method="cuda_events", submit_median=submit, samples=samples, clock=clock, tail=tail,
                  tail_overhead=tail_overhead)


def clocked(candidate: dict, reference: dict) -> dict:
    """{clock: {"candidate": .., "reference": ..}} from (median, submit, tail) per clock."""
    found = {}
    for clock in (GPU, LATENCY, ALL):
        found[clock] = {name: timing_of(*figures[clock], clock=clock, seed=i)
                        for i, (name, figures) in enumerate((("candidate", candidate), ("reference", reference)))}
    return found


# The shipped training kernel on an H200 (issue figures): GPU time 0.370 ms, latency 0.673 ms with a
# 0.61 ms host path, and no tail beyond an empty call's; eager 2.320 and 2.608 ms.
HOST_BOUND = {GPU: (0.370, 0.61), LATENCY: (0.673, 0.61, 0.012), ALL: (0.685, 0.61)}
EAGER = {GPU: (2.320, 0.2), LATENCY: (2.608, 0.3, 0.012), ALL: (2.620, 0.3)}


def eval_text(result: EvalResult) -> str:
    from rich.console import Console

    from harness.cli.eval_panel import eval_panel

    console = Console(record=True, width=400)
    console.print(eval_panel(result))
    return " ".join(console.export_text().split())


def test_host_latency_is_a_fact_not_hidden_work():
    timings = clocked(HOST_BOUND, EAGER)
    assert speedups.hidden_work_ms(timings[LATENCY]) == pytest.approx(0.002)
    assert not speedups.suspects_hidden_work(timings)
    share = speedups.host_share(timings)
    assert share is not None and share.host_ms == 0.61
    assert "0.61 ms of its 0.673 ms per call is spent on the host (GPU time 0.37" in share.text
    # work left on another stream: the device finishes 1 ms after the caller's stream
    side = clocked({GPU: (0.05, 0.02), LATENCY: (0.08, 0.02, 1.0), ALL: (1.08, 0.02)}, EAGER)
    assert speedups.suspects_hidden_work(side) and speedups.hidden_work_ms(side[LATENCY]) > 0.9


def test_the_judge_refuses_to_divide_across_clocks():
    mixed = {"candidate": timing_of(0.370, clock=GPU), "reference": timing_of(2.608, clock=LATENCY)}
    with pytest.raises(speedups.MixedClocks, match="candidate gpu, reference latency"):
        speedups.baselines(mixed)
    same = {"candidate": timing_of(0.370, clock=GPU), "reference": timing_of(2.320, clock=GPU)}
    assert speedups.baselines(same)[0].speedup == pytest.approx(2.320 / 0.370, rel=0.01)


class Timeline:
    """A simulated GPU: streams that run launched work in order, events stamped when their stream
    reaches them, a host clock that launches and waits. Stands in for torch.cuda's events and
    synchronize in the sampler, which then runs its real protocol."""

    def __init__(self):
        self.now = 0.0  # host, ms
        self.busy = {"caller": 0.0}

    def launch(self, stream: str, ms: float, cost: float = 0.005) -> None:
        self.now += cost
        start = max(self.now, self.busy.get(stream, 0.0))
        self.busy[stream] = start + ms

    def host(self, ms: float) -> None:
        self.now += ms

    def synchronize(self) -> None:
        self.now = max([self.now, *self.busy.values()])

    def event(self, enable_timing: bool = True):
        line = self

        class Event:
            at = 0.0

            def record(self):
                self.at = max(line.now, line.busy["caller"])
                line.busy["caller"] = self.at
                line.now += 0.001

            def synchronize(self):
                line.now = max(line.now, self.at)

            def elapsed_time(self, other):
                return other.at - self.at

        return Event()


@contextlib.contextmanager
def simulated(monkeypatch):
    line = Timeline()
    monkeypatch.setattr(timing, "_Event", line.event)
    monkeypatch.setattr(timing, "_synchronize", line.synchronize)
    monkeypatch.setattr(timing, "_perf_counter", lambda: line.now / 1e3)
    monkeypatch.setattr(timing, "_sleep", lambda cycles: line.launch("caller", cycles / 1e6))  # 1e6 cycles a ms
    sampler = timing.CudaSampler(torch.device("cpu"))
    sampler.flush_buffer = torch.empty(0, dtype=torch.uint8)
    sampler.reset_persistence = None
    yield line, sampler


def test_a_simulated_timeline_flags_an_unjoined_stream_and_not_a_busy_host(monkeypatch):
    with simulated(monkeypatch) as (line, sampler):
        def host_busy():  # one stream: a kernel, 0.3 ms of host work, a kernel
            line.launch("caller", 0.05)
            line.host(0.3)
            line.launch("caller", 0.05)

        def side_stream():  # the work on a stream nobody waits for
            line.launch("side", 1.0)

        def reference():
            line.launch("caller", 0.5)

        def entries(candidate):
            return {"candidate": timing.Entry(lambda seed: [], candidate), "reference": timing.Entry(lambda seed: [],
                                                                                                  reference)}

        rule = StopRule(min_samples=10, max_samples=20, warmup_calls=1, time_cap=60.0)
        busy = timing.time_interleaved(entries(host_busy), torch.device("cpu"), rule, sampler)
        assert set(busy) == {GPU, LATENCY, ALL}
        assert all(t.clock == clock for clock, each in busy.items() for t in each.values())
        assert busy[GPU]["candidate"].median == pytest.approx(0.1, abs=0.02)  # the queue kept full: GPU work alone
        assert busy[LATENCY]["candidate"].median == pytest.approx(0.36, abs=0.02)  # the host's 0.3 ms counts
        assert not speedups.suspects_hidden_work(busy)
        assert speedups.host_share(busy) is not None
        hidden = timing.time_interleaved(entries(side_stream), torch.device("cpu"), rule, sampler)
        assert speedups.suspects_hidden_work(hidden)
        assert speedups.hidden_work_ms(hidden[LATENCY]) == pytest.approx(1.0, abs=0.02)
        assert hidden[ALL]["candidate"].median > hidden[LATENCY]["candidate"].median + 0.9


def test_the_reference_alone_takes_the_verdicts_stage_only(monkeypatch):
    """A rule without the second clock (the reference alone, alone.Alone.rule) samples the headline's
    stage and no other: GPU time alone, or the latency stage with the every-stream clock it reads."""
    with simulated(monkeypatch) as (line, sampler):
        entries = {"reference": timing.Entry(lambda seed: [], lambda: line.launch("caller", 0.5))}
        rule = StopRule(min_samples=10, max_samples=20, warmup_calls=1, time_cap=60.0, second_clock=False)
        assert set(timing.time_interleaved(entries, torch.device("cpu"), rule, sampler)) == {GPU}
        latency = dataclasses.replace(rule, clock=LATENCY)
        assert set(timing.time_interleaved(entries, torch.device("cpu"), latency, sampler)) == {LATENCY, ALL}


def test_gpu_time_leaves_out_the_host_however_slow_it_is(monkeypatch):
    """Host time before one entry's window (the reference's `around`) and a slow host drawing each
    sample's inputs (the device runs dry meanwhile) put no host time in either window: the same GPU
    work reads the same GPU time (without the lead spin: 0.076 ms against 0.05 of work)."""
    with simulated(monkeypatch) as (line, sampler):
        def prepare(seed):
            line.host(0.3)
            return []

        def call():  # 0.02 ms of Python, then its one kernel
            line.host(0.02)
            line.launch("caller", 0.05)

        @contextlib.contextmanager
        def restoring_switches():
            line.host(0.05)
            yield

        entries = {"candidate": timing.Entry(prepare, call),
                   "reference": timing.Entry(prepare, lambda: call(), around=restoring_switches)}
        rule = StopRule(min_samples=10, max_samples=20, warmup_calls=2, time_cap=60.0)
        gpu = timing.time_interleaved(entries, torch.device("cpu"), rule, sampler)[GPU]
        assert gpu["candidate"].median == pytest.approx(0.05, abs=0.003)
        assert gpu["reference"].median == pytest.approx(0.05, abs=0.003)
        assert sampler.lead.ms(call) < timing.Lead.MAX_MS


def _trace(calls: list[list[tuple[str, float, float]]], caller: int = 7, spin: float = 1.0) -> list[dict]:
    """Chrome-trace events: per call, the markers on the caller's stream (the first `spin` us long) and
    (stream, start, end) work, in us from the first marker's start."""
    events, t = [], 0.0
    for work in calls:
        events.append({"ph": "X", "cat": "kernel", "name": "spin_kernel(long)", "ts": t, "dur": spin,
                       "args": {"stream": caller}})
        end = t + spin
        for stream, start, stop in work:
            events.append({"ph": "X", "cat": "kernel", "name": "k", "ts": t + start, "dur": stop - start,
                           "args": {"stream": stream}})
            if stream == caller:
                end = max(end, t + stop)
        events.append({"ph": "X", "cat": "kernel", "name": "spin_kernel(long)", "ts": end, "dur": 1.0,
                       "args": {"stream": caller}})
        t = end + 50.0
    return events


def test_the_trace_names_streams_that_run_outside_the_window_and_not_those_it_waits_for():
    joined = _trace([[(7, 2, 10), (13, 2, 9)]] * 3)  # the side stream ends before the caller's stream does
    assert torch_trace.outside_windows(joined) == ({}, 3)
    unjoined = _trace([[(7, 2, 3), (13, 2, 900)]] * 3)
    late, calls = torch_trace.outside_windows(unjoined)
    assert calls == 3 and list(late) == ["13"] and late["13"] == pytest.approx(0.897, abs=0.01)
    # a stream that never waits for the caller's runs while the caller's spins, before the window opens
    early, _ = torch_trace.outside_windows(_trace([[(7, 2010, 2011), (13, 10, 400)]] * 3, spin=2000.0))
    assert list(early) == ["13"] and early["13"] == pytest.approx(0.39, abs=0.01)
    assert torch_trace.outside_windows([]) == ({}, 0)


class FakeParty:
    """One process's side of a timing, its calls answered from scripted timings: call k of an entry on a
    stage reads that Timing's sample k (round and round), its host time and tail the Timing's own."""

    def __init__(self, scripted: dict, names: list[str]):
        self.scripted, self.entries = scripted, names
        self.seeds: list[int] = []
        self.made: dict[tuple, int] = {}
        self.stage = None

    def batch(self, stage, calls, flush=True):
        rows = {name: [] for name in self.entries}
        for call in calls:
            t = self.scripted[stage][call.entry]
            k = self.made.get((stage, call.entry), 0)
            self.made[(stage, call.entry)] = k + 1
            sample = t.samples[k % len(t.samples)]
            rows[call.entry].append([sample, t.tail, t.submit_median] if stage == LATENCY else
                                    [sample, t.submit_median])
            if call.entry == "candidate":
                self.seeds.append(call.seed)
        first = stage != self.stage
        self.stage = stage
        some = next(iter(self.scripted[stage].values()))
        return stages.Batch(rows=rows, overhead=stages.Overhead(some.overhead, some.tail_overhead,
                                                                 some.overhead + some.tail_overhead) if first else None,
                            method="cuda_events" if stage != HOST else "perf_counter")


class FakeChildren:
    """What Measure talks to, with replies scripted: each timing's two parties (beside.parties), the
    reference alone, the re-check and the stream trace."""

    def __init__(self, beside: dict, alone: dict, traced: StreamsTraced = StreamsTraced(calls=3),
                 device: str = "cuda", rechecked: CheckResult = CheckResult(True, trials=10)):
        self.options = EvalOptions(device=device, time_cap=2.0, clock=GPU, run_timeout=60.0)
        self.reference_info = ReferenceReady(ready=True, benchmark_shapes=[], parameter_bytes=0)
        self.beside, self.alone, self.traced = beside, alone, traced
        self.rechecked = rechecked  # the re-check's answer
        self.sent: list = []  # what the reference process was asked
        self.reference = SimpleNamespace(send=self.sent.append, forward=lambda message, cmd: None)
        self.worker_party: Optional[FakeParty] = None

    def parties(self, children, worker, rule, default_numerics):
        beside = self.beside.pop(0) if isinstance(self.beside, list) else self.beside
        scripted = {clock: each for clock, each in beside.items() if clock != ALL}
        self.worker_party = FakeParty(scripted, ["candidate"])
        return [self.worker_party, FakeParty(scripted, ["reference"])]

    def end(self, children, worker):
        return Timed(timed=[{"seed": seed} for seed in self.worker_party.seeds]), None

    @contextlib.contextmanager
    def holding_device(self, doing, notify, result):
        yield

    def run_deadline(self):
        return None

    def talk(self, worker, deadline, doing, kind, raw=False):
        return self.traced, None

    def reference_says(self, deadline, kind, doing):
        if kind is ReferenceTimed:  # the stages its rule asks for, as clock.time_interleaved samples them
            rule = from_dict(Request, self.sent[-1]).rule
            stage = {LATENCY: {LATENCY, ALL}}.get(rule.clock, {rule.clock})
            return ReferenceTimed(timings={c: {k: t for k, t in each.items() if k != "candidate"}
                                           for c, each in self.alone.items() if rule.second_clock or c in stage})
        return Checked(check=self.rechecked)


def measured(children: FakeChildren, monkeypatch) -> EvalResult:
    result = EvalResult(Verdict.CORRECT, "")
    worker = SimpleNamespace(send=lambda message: None, pause=lambda: None, resume=lambda: None)
    monkeypatch.setattr(beside, "parties", children.parties)
    monkeypatch.setattr(beside, "end", children.end)
    try:
        Measure(children).candidate(worker, result, lambda text: None)
        judge(result, children.reference_info, backward=False)
    except Finding as found:
        judged(found).fill(result)
    return result


def one_clock(result: EvalResult) -> str:
    clocks = {t.clock for t in result.timings.values()}
    assert len(clocks) == 1 and {b.key for b in result.baselines} <= set(result.timings)
    return clocks.pop()


def test_a_host_bound_candidate_and_reference_are_timed_on_gpu_time_and_never_rejected(monkeypatch):
    result = measured(FakeChildren(clocked(HOST_BOUND, EAGER), clocked(HOST_BOUND, EAGER)), monkeypatch)
    assert result.verdict is Verdict.CORRECT and one_clock(result) == GPU == result.clock
    assert result.speedup == pytest.approx(2.320 / 0.370, rel=0.02)
    assert result.hidden_work_ms is None and result.host_share is not None
    assert result.second.clock == LATENCY and {t.clock for t in result.second.timings.values()} == {LATENCY}
    assert result.second.speedup == pytest.approx(2.608 / 0.673, rel=0.02)
    assert speedups.basis_text(result).startswith("GPU time (calls queued")
    again = from_json(EvalResult, to_json(result))
    assert again.second.speedup == result.second.speedup and again.host_share == result.host_share


SIDE = {GPU: (0.05, 0.02), LATENCY: (0.08, 0.02, 1.0), ALL: (1.08, 0.02)}  # 1 ms left on another stream


def test_confirmed_hidden_work_is_the_verdict_and_never_moves_the_clock(monkeypatch):
    """A candidate seen leaving work off the caller's stream, beside a host-bound reference: the clock
    stays the one fixed before it ran, and the work the window missed is the verdict, not a speedup on
    another clock (where the reference's host time would flatter it)."""
    host_bound_reference = {GPU: (0.0533, 0.1), LATENCY: (0.118, 0.1, 0.012), ALL: (0.13, 0.1)}
    children = FakeChildren(clocked(SIDE, host_bound_reference), clocked(SIDE, host_bound_reference),
                            StreamsTraced(outside_ms={"13": 0.99}, calls=3))
    result = measured(children, monkeypatch)
    assert result.verdict is Verdict.INCORRECT and result.clock == GPU, result.explanation
    assert result.hidden_streams == ["13"] and result.hidden_work_ms == pytest.approx(0.99, abs=0.01)
    assert "on stream(s) 13 outside their timed windows" in result.explanation
    assert "wait_stream" in result.explanation
    assert result.speedup is None


def test_work_before_the_window_is_traced_where_gpu_time_is_far_below_what_the_host_leaves(monkeypatch):
    """No tail after the caller's stream, but GPU time far below the latency the host does not explain:
    work that ran while the device spun before the window (a stream that never waits for the caller's)."""
    early = {GPU: (0.0013, 0.01), LATENCY: (0.3, 0.01, 0.012), ALL: (0.312, 0.01)}
    assert speedups.suspects_hidden_work(clocked(early, EAGER))
    assert not speedups.suspects_hidden_work(clocked(HOST_BOUND, EAGER))
    result = measured(FakeChildren(clocked(early, EAGER), clocked(early, EAGER),
                                   StreamsTraced(outside_ms={"21": 0.29}, calls=3)), monkeypatch)
    assert result.verdict is Verdict.INCORRECT and "stream(s) 21" in result.explanation


def test_the_reference_alone_is_timed_on_the_verdicts_clock_and_its_spread_widens_both(monkeypatch):
    """The twins alone on the verdict's clock only: the other clock's interval takes the same placement
    spread (the device's work is what moves)."""
    alone = clocked(HOST_BOUND, EAGER)
    for n, moved in enumerate((1.0, 1.03), 1):  # two twins, one placement 3% slower: a spread of log(1.03)
        for clock, each in alone.items():
            each[f"placement_{n}"] = timing_of(EAGER[clock][0] * moved, clock=clock, seed=10 + n)
    children = FakeChildren(clocked(HOST_BOUND, EAGER), alone)
    children.reference_info.parameter_bytes = 1 << 20
    result = measured(children, monkeypatch)
    asked = [from_dict(Request, message).rule for message in children.sent]
    assert [(rule.clock, rule.second_clock, rule.min_samples) for rule in asked] == [(GPU, False, 5)]
    assert result.verdict is Verdict.CORRECT and result.placement_spread == pytest.approx(0.03, abs=0.005)
    assert result.second.clock == LATENCY and result.second.placement_spread == result.placement_spread
    wide = result.second.baselines[0].interval
    assert wide[1] / wide[0] > 1.06  # widened by the spread on both sides


def test_a_tail_the_trace_does_not_confirm_changes_nothing(monkeypatch):
    result = measured(FakeChildren(clocked(SIDE, EAGER), clocked(SIDE, EAGER), StreamsTraced(calls=3)), monkeypatch)
    assert one_clock(result) == GPU and result.hidden_work_ms is None and result.verdict is Verdict.CORRECT
    assert result.details["unconfirmed_tail_ms"] > 0.9


def test_a_candidate_slowing_the_reference_on_the_verdicts_clock_is_still_rejected(monkeypatch):
    slowed = dict(EAGER, **{GPU: (4.0, 0.2)})
    result = measured(FakeChildren(clocked(HOST_BOUND, slowed), clocked(HOST_BOUND, EAGER)), monkeypatch)
    assert result.verdict is Verdict.REJECTED and "slower beside the candidate" in result.explanation


def test_wrong_timed_outputs_are_the_verdict_before_a_slowed_reference(monkeypatch):
    slowed = dict(EAGER, **{GPU: (4.0, 0.2)})
    wrong = CheckResult(False, trials=10, reasons=["1 of 10 timed calls returned wrong outputs"])
    result = measured(FakeChildren(clocked(HOST_BOUND, slowed), clocked(HOST_BOUND, EAGER), rechecked=wrong),
                      monkeypatch)
    assert result.verdict is Verdict.INCORRECT and "while being timed 1 of 10" in result.explanation
    assert "slower beside the candidate" not in result.explanation


def test_a_reference_somewhat_slower_beside_the_candidate_gives_the_verdict_its_time_alone(monkeypatch):
    """1.3x slower beside than alone: under the refusal, but past the noise. No load from other processes
    excuses it (the candidate's processes are stopped while the reference runs): timed again once (load
    comes and goes), and still so, the speedup rests on the reference alone, unpaired, and says so."""
    beside_ = {GPU: (3.0, 0.2), LATENCY: (2.608, 0.3, 0.012), ALL: (2.62, 0.3)}
    children = FakeChildren(clocked(HOST_BOUND, beside_), clocked(HOST_BOUND, EAGER))
    result = measured(children, monkeypatch)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.speedup == pytest.approx(2.320 / 0.370, rel=0.02)  # alone's 2.32 ms, not beside's 3.0
    assert result.baselines[0].paired is False and result.details["rests_on_alone"] == ["reference"]
    assert any("rests on the reference alone" in w for w in result.warnings)
    assert result.retimed_for_slowdown is None and len(children.sent) == 2
    assert result.details["retimed_for_gap"] == pytest.approx(math.log(3.0 / 2.32), abs=0.01)
    assert "reference_gap" not in result.details  # the reference alone is the figure: no gap to cover


@pytest.mark.parametrize("moved", [1.06, 0.94])
def test_a_gap_between_the_reference_beside_and_alone_is_timed_again_then_covered_and_said(monkeypatch, moved):
    """6% slower (or faster) beside the candidate than alone, beyond the noise and past RETIME_GAP but not
    REST_ON_ALONE: timed again once; still so, the interval reaches the speedup over the reference alone,
    and a sentence the model reads says so. A gap the second timing does not see is forgotten."""
    beside_ = dict(EAGER, **{GPU: (2.320 * moved, 0.2)})
    children = FakeChildren(clocked(HOST_BOUND, beside_), clocked(HOST_BOUND, EAGER))
    result = measured(children, monkeypatch)
    assert result.verdict is Verdict.CORRECT and len(children.sent) == 2, result.explanation
    over_alone = 2.320 / 0.370
    assert result.speedup_interval[0] < over_alone < result.speedup_interval[1]
    assert result.details["reference_gap"] == pytest.approx(math.log(moved), abs=0.005)
    (said,) = [w for w in warning_lines(result, frozenset()) if "less certain" in w]
    assert f"{'slower' if moved > 1 else 'faster'} beside the candidate than alone" in said
    gone = FakeChildren([clocked(HOST_BOUND, beside_), clocked(HOST_BOUND, EAGER)], clocked(HOST_BOUND, EAGER))
    result = measured(gone, monkeypatch)
    assert "reference_gap" not in result.details and not any("less certain" in w for w in result.warnings)


def test_on_a_cpu_a_reference_twice_as_slow_beside_gains_nothing_whatever_its_time(monkeypatch):
    """No floor in milliseconds: a 0.1 ms reference 2.1x slower beside the candidate than alone gives the
    verdict its time alone (the candidate's processes were stopped while it ran: on a CPU that is load from
    elsewhere, so nothing is refused, and nothing is gained either); 1.5x is within a CPU's wander."""
    def timed(candidate: float, reference: float) -> dict:
        found = {HOST: {"candidate": timing_of(candidate, clock=HOST, seed=0),
                        "reference": timing_of(reference, clock=HOST, seed=1)}}
        for each in found[HOST].values():
            each.method = "perf_counter"
        return found

    alone = timed(0.05, 0.1)
    slowed = measured(FakeChildren(timed(0.05, 0.21), alone, device="cpu"), monkeypatch)
    assert slowed.verdict is Verdict.CORRECT and slowed.speedup == pytest.approx(2.0, rel=0.02), slowed.explanation
    assert slowed.details["rests_on_alone"] == ["reference"] and slowed.retimed_for_slowdown is None
    assert any("2.10x slower beside the candidate" in w for w in slowed.warnings), slowed.warnings
    wander = measured(FakeChildren(timed(0.05, 0.15), alone, device="cpu"), monkeypatch)
    assert wander.verdict is Verdict.CORRECT and wander.speedup == pytest.approx(3.0, rel=0.02)


def test_legacy_flags_read_cleanly_and_switches_are_reported_not_held_against_it(cpu_options):
    result = evaluate(PROBLEMS / "small_layernorm.py", CANDIDATES / "reads_flags_flips_benchmark.py", cpu_options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert any("torch.backends.cudnn.benchmark = True (was False)" in w for w in result.warnings), result.warnings
    assert result.clock == "host" and result.second is None


@pytest.mark.gpu
def test_a_host_busy_candidate_is_host_bound_not_hiding_work(cache_dir):
    from harness import EvalOptions

    result = evaluate(PROBLEMS / "small_layernorm.py", CANDIDATES / "host_busy.py",
                      EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=2.0))
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.hidden_work_ms is None and result.clock == GPU and one_clock(result) == GPU
    assert result.host_share is not None and result.host_share.host_ms >= 0.3, result.host_share
    assert result.host_share.text in eval_text(result)
    assert result.second.clock == LATENCY and result.second.timings["candidate"].median >= 0.3


@pytest.mark.gpu
def test_the_shipped_training_kernel_hides_no_work_and_every_figure_is_gpu_time(cache_dir):
    from harness import EvalOptions

    repo = PROBLEMS.parent.parent
    result = evaluate(repo / "problems" / "rmsnorm_train.py", repo / "kernels" / "rmsnorm_train.py",
                      EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=4.0, backward=True,
                                  compile_baseline=True))
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.hidden_work_ms is None and one_clock(result) == GPU, result.warnings
    compiled = [b for b in result.baselines if b.name == "torch.compile"]
    assert compiled and all(result.timings[b.key].clock == GPU for b in compiled)
    assert {t.clock for t in result.second.timings.values()} == {LATENCY}
