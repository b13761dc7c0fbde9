"""One clock per verdict: GPU time and latency kept apart, host latency never read as hidden work,
hidden work confirmed by a per-stream trace, and the judge refusing to divide across clocks."""
import contextlib
import dataclasses
import random
import statistics
from types import SimpleNamespace
from typing import Optional

import pytest
import torch

from conftest import CANDIDATES, PROBLEMS
from harness import EvalResult, Timing, Verdict, evaluate, from_dict, from_json, to_json
from harness.engine.timing import clock as timing
from harness.engine.timing import speedups
from harness.engine.profiling import torch_trace
from harness.engine.judge import judge
from harness.engine.timing.measure import Measure
from harness.engine.options import EvalOptions
from harness.engine.findings import Finding
from harness.engine.verdicts import judged
from harness.engine.processes.protocol import (Checked, ReferenceReady, ReferenceTimed, Request, StopRule,
                                               StreamsTraced, Timed)
from harness.results import CheckResult, Clock

GPU, LATENCY, ALL = Clock.GPU.value, Clock.LATENCY.value, Clock.ALL_STREAMS.value


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
    """A rule without the second clock (the reference alone, measure._alone_rule) samples the headline's
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


def _trace(calls: list[list[tuple[str, float, float]]], caller: int = 7) -> list[dict]:
    """Chrome-trace events: per call, the markers on the caller's stream and (stream, start, end) work."""
    events, t = [], 0.0
    for work in calls:
        events.append({"ph": "X", "cat": "kernel", "name": "spin_kernel(long)", "ts": t, "dur": 1.0,
                       "args": {"stream": caller}})
        end = t + 1.0
        for stream, start, stop in work:
            events.append({"ph": "X", "cat": "kernel", "name": "k", "ts": t + start, "dur": stop - start,
                           "args": {"stream": stream}})
            if stream == caller:
                end = max(end, t + stop)
        events.append({"ph": "X", "cat": "kernel", "name": "spin_kernel(long)", "ts": end, "dur": 1.0,
                       "args": {"stream": caller}})
        t = end + 50.0
    return events


def test_the_trace_names_streams_that_outlast_the_caller_and_not_those_it_waits_for():
    joined = _trace([[(7, 2, 10), (13, 2, 9)]] * 3)  # the side stream ends before the caller's stream does
    assert torch_trace.late_streams(joined) == ({}, 3)
    unjoined = _trace([[(7, 2, 3), (13, 2, 900)]] * 3)
    late, calls = torch_trace.late_streams(unjoined)
    assert calls == 3 and list(late) == ["13"] and late["13"] == pytest.approx(0.896, abs=0.01)
    assert torch_trace.late_streams([]) == ({}, 0)


class FakeChildren:
    """What Measure talks to, with replies scripted: the worker's timing, the reference alone, the
    re-check and the stream trace."""

    def __init__(self, beside: dict, alone: dict, traced: StreamsTraced = StreamsTraced(calls=3),
                 device: str = "cuda", background: Optional[float] = None,
                 rechecked: CheckResult = CheckResult(True, trials=10)):
        self.options = EvalOptions(device=device, time_cap=2.0, clock=GPU, run_timeout=60.0)
        self.reference_info = ReferenceReady(ready=True, benchmark_shapes=[], parameter_bytes=0)
        self.beside, self.alone, self.traced = beside, alone, traced
        self.background = background  # the worker's process tree's CPU beside the timing thread (Timed)
        self.rechecked = rechecked  # the re-check's answer
        self.sent: list = []  # what the reference process was asked
        self.reference = SimpleNamespace(send=self.sent.append, forward=lambda message, cmd: None)

    @contextlib.contextmanager
    def holding_device(self, doing, notify, result):
        yield

    def run_deadline(self):
        return None

    def talk(self, worker, deadline, doing, kind, raw=False):
        if kind is Timed:  # a list: one timing reply after another
            beside = self.beside.pop(0) if isinstance(self.beside, list) else self.beside
            n = sum(each["candidate"].n for clock, each in beside.items() if clock != ALL)
            return Timed(timings=beside, timed=[{}] * n, background_cpu_share=self.background), None
        return self.traced, None

    def reference_says(self, deadline, kind, doing):
        if kind is ReferenceTimed:  # the stages its rule asks for, as clock.time_interleaved samples them
            rule = from_dict(Request, self.sent[-1]).rule
            stage = {LATENCY: {LATENCY, ALL}}.get(rule.clock, {rule.clock})
            return ReferenceTimed(timings={c: {k: t for k, t in each.items() if k != "candidate"}
                                           for c, each in self.alone.items() if rule.second_clock or c in stage})
        return Checked(check=self.rechecked)


def measured(children: FakeChildren) -> EvalResult:
    result = EvalResult(Verdict.CORRECT, "")
    worker = SimpleNamespace(send=lambda message: None)
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


def test_a_host_bound_candidate_and_reference_are_timed_on_gpu_time_and_never_rejected():
    result = measured(FakeChildren(clocked(HOST_BOUND, EAGER), clocked(HOST_BOUND, EAGER)))
    assert result.verdict is Verdict.CORRECT and one_clock(result) == GPU == result.clock
    assert result.speedup == pytest.approx(2.320 / 0.370, rel=0.02)
    assert result.hidden_work_ms is None and result.host_share is not None
    assert result.second.clock == LATENCY and {t.clock for t in result.second.timings.values()} == {LATENCY}
    assert result.second.speedup == pytest.approx(2.608 / 0.673, rel=0.02)
    assert speedups.basis_text(result).startswith("GPU time (calls queued")
    again = from_json(EvalResult, to_json(result))
    assert again.second.speedup == result.second.speedup and again.host_share == result.host_share


def test_confirmed_hidden_work_puts_every_timing_on_the_all_streams_clock():
    """The old mix: a candidate seen hiding work, beside a host-bound reference. Now every figure of
    the verdict, the reference alone included, counts every stream, and the reference is not
    'slowed down' by its own launch cost."""
    side = {GPU: (0.05, 0.02), LATENCY: (0.08, 0.02, 1.0), ALL: (1.08, 0.02)}
    host_bound_reference = {GPU: (0.0533, 0.1), LATENCY: (0.118, 0.1, 0.012), ALL: (0.13, 0.1)}
    children = FakeChildren(clocked(side, host_bound_reference), clocked(side, host_bound_reference),
                            StreamsTraced(late_ms={"13": 0.99}, calls=3))
    result = measured(children)
    assert result.verdict is Verdict.CORRECT and one_clock(result) == ALL == result.clock
    assert result.second is None and result.host_share is None
    assert result.hidden_streams == ["13"] and result.hidden_work_ms == pytest.approx(0.99, abs=0.01)
    assert result.speedup == pytest.approx(0.13 / 1.08, rel=0.02)
    assert result.reference_alone_ms == pytest.approx(0.13, rel=0.02)
    assert "whole device synchronized" in speedups.basis_text(result)
    assert any("on stream(s) 13" in w for w in result.warnings)


def test_the_reference_alone_is_timed_on_the_verdicts_clock_and_its_spread_widens_both():
    """The twins alone on the verdict's clock only: the other clock's interval takes the same placement
    spread (the device's work is what moves), and the every-stream verdict asks for the latency stage."""
    alone = clocked(HOST_BOUND, EAGER)
    for n, moved in enumerate((1.0, 1.03), 1):  # two twins, one placement 3% slower: a spread of log(1.03)
        for clock, each in alone.items():
            each[f"placement_{n}"] = timing_of(EAGER[clock][0] * moved, clock=clock, seed=10 + n)
    children = FakeChildren(clocked(HOST_BOUND, EAGER), alone)
    children.reference_info.parameter_bytes = 1 << 20
    result = measured(children)
    asked = [from_dict(Request, message).rule for message in children.sent]
    assert [(rule.clock, rule.second_clock, rule.min_samples) for rule in asked] == [(GPU, False, 5)]
    assert result.verdict is Verdict.CORRECT and result.placement_spread == pytest.approx(0.03, abs=0.005)
    assert result.second.clock == LATENCY and result.second.placement_spread == result.placement_spread
    wide = result.second.baselines[0].interval
    assert wide[1] / wide[0] > 1.06  # widened by the spread on both sides
    side = {GPU: (0.05, 0.02), LATENCY: (0.08, 0.02, 1.0), ALL: (1.08, 0.02)}
    hidden = FakeChildren(clocked(side, EAGER), clocked(side, EAGER), StreamsTraced(late_ms={"13": 0.99}, calls=3))
    assert measured(hidden).clock == ALL
    assert [from_dict(Request, m).rule.clock for m in hidden.sent] == [LATENCY]


def test_a_retiming_that_finds_hidden_work_judges_on_the_clock_it_moved_to():
    """A slowdown suspected on GPU time is timed again; where the second timing confirms hidden work,
    the verdict moves to every stream, and the reference alone is read there (the first alone
    timing, on GPU time, has no clock in common with it)."""
    slowed = dict(EAGER, **{GPU: (4.0, 0.2)})
    side = {GPU: (0.05, 0.02), LATENCY: (0.08, 0.02, 1.0), ALL: (1.08, 0.02)}
    children = FakeChildren([clocked(HOST_BOUND, slowed), clocked(side, EAGER), clocked(side, EAGER)],
                            clocked(side, EAGER), StreamsTraced(late_ms={"13": 0.99}, calls=3))
    result = measured(children)
    assert result.clock == ALL and result.verdict is Verdict.CORRECT
    assert [from_dict(Request, m).rule.clock for m in children.sent] == [GPU, GPU, LATENCY]


def test_a_tail_the_trace_does_not_confirm_changes_no_clock():
    side = {GPU: (0.05, 0.02), LATENCY: (0.08, 0.02, 1.0), ALL: (1.08, 0.02)}
    result = measured(FakeChildren(clocked(side, EAGER), clocked(side, EAGER), StreamsTraced(calls=3)))
    assert one_clock(result) == GPU and result.hidden_work_ms is None
    assert result.details["unconfirmed_tail_ms"] > 0.9


def test_a_candidate_slowing_the_reference_on_the_verdicts_clock_is_still_rejected():
    slowed = dict(EAGER, **{GPU: (4.0, 0.2)})
    result = measured(FakeChildren(clocked(HOST_BOUND, slowed), clocked(HOST_BOUND, EAGER)))
    assert result.verdict is Verdict.REJECTED and "slower beside the candidate" in result.explanation


def test_wrong_timed_outputs_are_the_verdict_before_a_slowed_reference():
    slowed = dict(EAGER, **{GPU: (4.0, 0.2)})
    wrong = CheckResult(False, trials=10, reasons=["1 of 10 timed calls returned wrong outputs"])
    result = measured(FakeChildren(clocked(HOST_BOUND, slowed), clocked(HOST_BOUND, EAGER), rechecked=wrong))
    assert result.verdict is Verdict.INCORRECT and "while being timed 1 of 10" in result.explanation
    assert "slower beside the candidate" not in result.explanation


def test_a_host_bound_reference_slower_beside_the_candidate_is_reported_not_rejected():
    """Figures from an H100 host with its other cores busy: a LayerNorm of 4096 elements, whose timed
    calls are mostly host submission, read 1.4-1.6x slower in the candidate's process than alone."""
    tiny_beside = {GPU: (0.0794, 0.0575), LATENCY: (0.09, 0.06, 0.012), ALL: (0.092, 0.06)}
    tiny_alone = {GPU: (0.0493, 0.041), LATENCY: (0.06, 0.045, 0.012), ALL: (0.062, 0.045)}
    candidate = {GPU: (0.157, 0.133), LATENCY: (0.17, 0.14, 0.012), ALL: (0.172, 0.14)}
    children = FakeChildren(clocked(candidate, tiny_beside), clocked(candidate, tiny_alone))
    result = measured(children)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.retimed_for_slowdown is None  # under its own threshold: nothing to judge again
    assert any("slower beside the candidate" in w and "the host's" in w for w in result.warnings), result.warnings


def test_a_host_bound_reference_made_to_sleep_beside_the_candidate_is_still_rejected():
    """An aten kernel overridden to sleep 2 ms in the candidate's process (tests/adversarial/
    slows_reference_dispatcher.py) on the same host-bound reference."""
    tiny_alone = {GPU: (0.0493, 0.041), LATENCY: (0.06, 0.045, 0.012), ALL: (0.062, 0.045)}
    asleep = {GPU: (2.07, 2.06), LATENCY: (2.08, 2.06, 0.012), ALL: (2.09, 2.06)}
    candidate = {GPU: (0.157, 0.133), LATENCY: (0.17, 0.14, 0.012), ALL: (0.172, 0.14)}
    result = measured(FakeChildren(clocked(candidate, asleep), clocked(candidate, tiny_alone)))
    assert result.verdict is Verdict.REJECTED and "slower beside the candidate" in result.explanation


def test_on_a_cpu_load_from_other_processes_never_convicts_and_the_candidates_own_work_does():
    """Figures from the 2-core machine, twice as many busy processes as cores and four test processes:
    a reference of three small ops read 8.7x slower beside an honest candidate (5.532 ms) than alone
    (0.6327 ms), its thread waiting for a CPU most of that time. Less those waits it is no slower, and
    the candidate ran nothing beside its calls: not refused. A thread of the candidate's taking the CPU,
    or a sleep slipped into the reference's path (no wait for a CPU), is still refused."""
    host = Clock.HOST.value

    def timed(reference: float, unloaded: float) -> dict:
        found = {host: {"candidate": timing_of(0.6, clock=host, seed=0), "reference": timing_of(reference, clock=host,
                                                                                                seed=1)}}
        for each in found[host].values():
            each.method = "perf_counter"
        found[host]["reference"].unloaded_median = unloaded
        return found

    beside, alone = timed(5.532, 0.66), timed(0.6327, 0.62)
    loaded = measured(FakeChildren(beside, alone, device="cpu", background=0.001))
    assert loaded.verdict is Verdict.CORRECT, loaded.explanation
    assert any("8.74x slower" in w and "other processes' load, not refused" in w for w in loaded.warnings)
    own_thread = measured(FakeChildren(beside, alone, device="cpu", background=0.9))
    assert own_thread.verdict is Verdict.REJECTED and "8.7x slower beside the candidate" in own_thread.explanation
    asleep = measured(FakeChildren(timed(2.7, 2.65), alone, device="cpu", background=0.0))
    assert asleep.verdict is Verdict.REJECTED, asleep.explanation
    assert measured(FakeChildren(beside, alone, device="cpu")).verdict is Verdict.REJECTED  # not measured: wall time


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
