"""Stopping criteria: a stage ends early where its samples settle fast, and runs to its cap where
they never do; the criterion and why each stage ended are on record."""
import random

import pytest
import torch

from harness.engine import stopping
from harness.engine.processes.protocol import StopRule
from harness.engine.timing.clock import Entry, Sampler, time_interleaved
from harness.results import Ended


class Simulated(Sampler):
    """A clock that reads what each callable returns: the callable draws its own 'milliseconds'."""

    def __init__(self):  # no flush buffer: nothing real is timed
        pass

    def queue(self, timed: Entry, seed: int, probe: bool = False, flush: bool = True):
        drawn = timed.fn(*timed.make_args(seed)) or 0.0  # the empty call reads 0
        return drawn, 0.0, None  # its time, its host time, its output


def stream(spread: float, seed: int) -> Entry:
    rng = random.Random(seed)
    return Entry(lambda s: [], lambda: 1.0 + rng.uniform(-spread, spread))


def timed(spread: float, criterion: str, cap: float = 0.5, **rule):
    entries = {"candidate": stream(spread, 1), "reference": stream(spread, 2)}
    stop = StopRule(criterion, stopping.criterion(criterion).default_target("cuda"), time_cap=cap,
                    warmup_calls=0, **rule)
    return time_interleaved(entries, torch.device("cpu"), stop, Simulated())["host"]


@pytest.mark.parametrize("criterion", ["interval", "rel-se", "settled"])
def test_a_criterion_ends_a_stable_stream_soon_after_its_fewest_samples(criterion):
    found = timed(0.0001, criterion, cap=60.0, min_samples=10, max_samples=10**9)
    assert {t.ended for t in found.values()} == {Ended.MET.value}
    # the batch after the first takes just what reaches the fewest samples: met there, the stage ends there
    assert all(t.n == 10 for t in found.values())


@pytest.mark.parametrize("criterion", ["interval", "rel-se", "settled", "cap"])
def test_a_noisy_stream_runs_to_the_time_cap(criterion):
    found = timed(0.9, criterion, cap=0.3, max_samples=10**9)
    assert {t.ended for t in found.values()} == {Ended.TIME_CAP.value}
    assert all(t.n >= 10 for t in found.values())  # past the fewest samples, the criterion never met


def test_the_most_samples_bound_a_stage_whatever_the_criterion():
    found = timed(0.9, "cap", cap=60.0, max_samples=40)
    assert {(t.ended, t.n) for t in found.values()} == {(Ended.SAMPLE_CAP.value, 40)}


def test_the_interval_criterion_weighs_the_two_noisiest_callables():
    steady = [1.0 + 0.0001 * (i % 7) for i in range(50)]
    noisy = [1.0 + 0.2 * (i % 7) for i in range(50)]
    interval = stopping.criterion("interval")
    assert interval.met({"a": steady, "b": steady}, 0.01)
    assert not interval.met({"a": steady, "b": noisy}, 0.01)
    assert interval.met({"a": steady, "b": noisy}, 1.0)


def test_settled_waits_out_a_drift_that_a_small_standard_error_would_hide():
    drifting = [1.0 + (0.0 if i < 40 else 0.05) + 0.0001 * (i % 3) for i in range(60)]
    flat = [1.0 + 0.0001 * (i % 3) for i in range(60)]
    assert stopping.criterion("rel-se").met({"a": drifting}, 0.01)
    assert not stopping.criterion("settled").met({"a": drifting}, 0.01)
    assert stopping.criterion("settled").met({"a": flat}, 0.01)


def test_an_unknown_criterion_names_the_known_ones():
    with pytest.raises(ValueError, match="interval, rel-se, settled, cap"):
        stopping.criterion("fastest")


def test_the_basis_says_what_stopped_the_sampling():
    from harness.engine.timing.speedups import basis_text, baselines
    from harness.results import EvalResult, Timing, Verdict

    def timing(ended):
        return Timing(median=1.0, iqr=0.01, mean=1.0, min=0.99, n=41, rel_se=0.001, method="cuda_events",
                      samples=[1.0] * 41, clock="gpu", ended=ended)

    for ended, said in ((Ended.MET.value, "median of 41 samples (until --stop interval 1% was met)"),
                        (Ended.TIME_CAP.value, "median of 41 samples (the time cap ended them)")):
        timings = {"candidate": timing(ended), "reference": timing(ended)}
        result = EvalResult(Verdict.CORRECT, "", timings=timings, baselines=baselines(timings), clock="gpu",
                            stop="interval", stop_target=0.01)
        assert said in basis_text(result)


def test_an_entry_takes_its_own_warm_ups_else_the_rules():
    """An entry whose process has run its kernels already (a twin, the reference alone, the candidate
    after its trials) warms up once; every other entry takes the rule's warm-up calls. Warm-ups are
    neither timed nor observed."""
    calls = {"reference": 0, "placement_1": 0}

    def counted(name):
        def fn():
            calls[name] += 1
            return 1.0
        return fn

    entries = {"reference": Entry(lambda s: [], counted("reference")),
               "placement_1": Entry(lambda s: [], counted("placement_1"), warmups=1)}
    stop = StopRule("interval", 0.01, time_cap=60.0, warmup_calls=3, min_samples=5, max_samples=10**9)
    found = time_interleaved(entries, torch.device("cpu"), stop, Simulated())["host"]
    assert calls["reference"] - found["reference"].n == 3
    assert calls["placement_1"] - found["placement_1"].n == 1
