"""The pieces the judge's invariants rest on, each on its own: the stream-order probe's flip, the numbers
that judge precision, the driver that draws every timed call, and the watch on the operators' kernels."""
import math
import random

import pytest
import torch

from harness.engine.scrutiny import FAST
from harness.engine.timing import stages
from harness.engine.processes.protocol import StopRule
from harness.integrity import precision
from harness.integrity.guards import DispatchWatch
from harness.integrity.stream_order import decoy
from harness.results import Clock


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_probes_flip_changes_every_float_and_undoes_itself_bit_for_bit(dtype):
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"),
                            torch.finfo(dtype).tiny, torch.finfo(dtype).max], dtype=dtype)
    values = torch.cat([special, torch.randn(1000).to(dtype)])
    kept = values.clone()
    index = torch.arange(10)
    assert decoy([values, index, 3.0]) == 1  # the float tensor alone: indices and numbers are left as they are
    finite = torch.isfinite(kept)
    assert not (values[finite] == kept[finite]).any()  # every finite value moved, none stayed
    assert torch.isfinite(values[finite]).all()  # and none became infinite or NaN
    decoy([values])
    assert torch.equal(values.view(torch.uint8), kept.view(torch.uint8)) and torch.equal(index, torch.arange(10))


def test_precision_tells_a_bfloat16_gemm_from_float32_ones_that_sum_in_other_orders():
    torch.manual_seed(0)
    x, w = torch.randn(128, 64), torch.randn(4096, 64) * 0.1
    exact = (x.double() @ w.double().t()).mean(-1)
    eager = (x @ w.t()).mean(-1)
    measured = precision.Exact([exact], [precision.relative_rms(eager, exact)])
    low = (x.bfloat16() @ w.t().bfloat16()).float().mean(-1)
    assert torch.allclose(low, eager, atol=1e-4, rtol=1e-4)  # the tolerance cannot tell them apart
    found, figures = precision.shortfall(measured, [low], ["output 0"])
    assert found is not None and found.ratio > 100 * precision.RATIO and figures[0]["limit"] == precision.RATIO
    # float32 summed one product after another, then one output after another: another order, same precision
    ordered = torch.zeros(128)
    for column in (x @ w.t()).unbind(1):
        ordered += column
    found, figures = precision.shortfall(measured, [ordered / 4096], ["output 0"])
    assert found is None and figures[0]["ratio"] < precision.RATIO / 4


def test_an_exact_op_is_held_to_float32s_rounding_and_integer_outputs_are_not_judged():
    exact = torch.randn(1000, dtype=torch.float64)
    eager = exact.float()
    measured = precision.Exact([exact, torch.arange(3)], [precision.relative_rms(eager, exact), None])
    assert precision.relative_rms(eager, exact) < precision.UNIT
    found, figures = precision.shortfall(measured, [eager, torch.arange(3)], ["output 0", "output 1"])
    assert found is None and len(figures) == 1
    halved = eager.half().float()
    assert precision.shortfall(measured, [halved, torch.arange(3)], ["output 0", "output 1"])[0].label == "output 0"
    assert precision.relative_rms(torch.zeros(3), torch.zeros(3, dtype=torch.float64)) is None


class Party:
    """A party whose calls take 1 ms, recording what it was asked."""

    def __init__(self, *names: str):
        self.entries, self.asked = list(names), []

    def batch(self, stage, calls, flush=True):
        self.asked.append((stage, calls))
        rows = {name: [[1.0, 0.1] if stage != Clock.LATENCY.value else [1.0, 0.01, 0.1]
                       for call in calls if call.entry == name] for name in self.entries}
        first = len(self.asked) == 1 or self.asked[-2][0] != stage
        return stages.Batch(rows=rows, overhead=stages.Overhead(0.01, 0.0, 0.01) if first else None,
                            method="cuda_events")


def test_the_driver_draws_every_call_and_pairs_the_parties_round_for_round():
    worker, reference = Party("candidate"), Party("reference", "reference_defaults")
    rule = StopRule(min_samples=10, max_samples=40, time_cap=60.0, criterion="cap")
    sampled = stages.run([worker, reference], rule, on_gpu=True, rng=random.Random(1))
    gpu, latency = sampled.clocked[Clock.GPU.value], sampled.clocked[Clock.LATENCY.value]
    assert {t.n for t in gpu.values()} == {40} and Clock.ALL_STREAMS.value in sampled.clocked
    for (stage, mine), (their_stage, theirs) in zip(worker.asked, reference.asked):
        assert stage == their_stage and len(theirs) == 2 * len(mine)  # as many rounds each: sample i pairs
        if stage == Clock.GPU.value:  # a share of each entry's queued calls, one at least, probed
            for party, calls in ((worker, mine), (reference, theirs)):
                for name in party.entries:
                    probed = [c.probe for c in calls if c.entry == name]
                    assert 1 <= sum(probed) <= max(1, math.ceil(FAST.probe_share * len(probed)))
        else:
            assert not any(c.probe for c in mine + theirs)
    seeds = sampled.seeds["candidate"]
    assert len(seeds) == len(set(seeds)) == gpu["candidate"].n + latency["candidate"].n
    assert seeds == [c.seed for _, calls in worker.asked for c in calls]


def test_kernels_registered_for_torchs_own_operators_are_seen_and_new_operators_are_not():
    watch = DispatchWatch()
    assert watch.new() == []
    library = torch.library.Library("aten", "IMPL")
    library.impl("cosh", lambda x: x, "CPU")
    ours = torch.library.Library("invariants_test", "DEF")
    ours.define("twice(Tensor x) -> Tensor")
    ours.impl("twice", lambda x: 2 * x, "CPU")
    try:
        assert watch.new() == ["aten::cosh"]
    finally:
        library._destroy()
        ours._destroy()
