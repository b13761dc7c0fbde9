"""Speedups with their intervals, and the baselines they are taken against."""
import math
import random
import statistics

import pytest

from rich.console import Console

from conftest import CANDIDATES, PROBLEMS
from harness import EvalOptions, EvalResult, Timing, Verdict, evaluate, from_json, to_json
from harness.cli.eval_panel import eval_panel
from harness.engine.timing import speedups
from harness.runs.history import Replay
from harness.stats import overlap, ratio_interval


def timing(samples, method="cuda_events") -> Timing:
    median = statistics.median(samples)
    return Timing(median=median, iqr=0.0, mean=median, min=min(samples), n=len(samples), rel_se=0.0,
                  method=method, samples=list(samples), clock="gpu")


def test_the_interval_holds_the_ratio_of_medians():
    rng = random.Random(1)
    reference = [rng.gauss(2.0, 0.05) for _ in range(200)]
    candidate = [rng.gauss(1.0, 0.02) for _ in range(200)]
    low, high = ratio_interval(reference, candidate)
    assert low < statistics.median(reference) / statistics.median(candidate) < high
    assert 1.9 < low and high < 2.1


def test_pairing_cancels_what_a_round_shared():
    """Drift common to both entries of a round (clock, load) leaves the paired interval narrow."""
    rng = random.Random(2)
    drift = [1.0 + 0.3 * rng.random() for _ in range(100)]
    reference = [2.0 * d * rng.gauss(1, 0.002) for d in drift]
    candidate = [1.0 * d * rng.gauss(1, 0.002) for d in drift]
    paired, unpaired = ratio_interval(reference, candidate), ratio_interval(reference, candidate, paired=False)
    assert paired[1] - paired[0] < (unpaired[1] - unpaired[0]) / 5


def test_an_identical_copy_reads_one():
    rng = random.Random(3)
    times = [rng.gauss(1.0, 0.03) for _ in range(300)]
    low, high = ratio_interval(times, list(reversed(times)))
    assert low <= 1.0 <= high


def test_overlap():
    assert overlap([1.0, 1.2], [1.1, 1.3]) and not overlap([1.0, 1.05], [1.1, 1.3])


def test_the_headline_is_the_faster_numerics_setting_and_the_other_shows_where_it_differs():
    timings = {"candidate": timing([1.0] * 30), "reference": timing([3.0] * 30),
               "reference_defaults": timing([1.0] * 30)}
    found = speedups.baselines(timings)
    assert [(b.name, b.numerics) for b in found] == [("eager", "default"), ("eager", "ieee")]
    assert found[0].speedup == 1.0 and found[1].speedup == 3.0
    assert len(speedups.shown(found)) == 2
    assert speedups.faster_of(found, found[0]) == "the faster of PyTorch defaults 1 ms and IEEE float32 3 ms"
    # TF32 slower than IEEE (cuDNN's GRU on an H100): IEEE is the headline, so a copy reads 1.0, not 3.0
    slower = speedups.baselines({"candidate": timing([1.0] * 30), "reference": timing([1.0] * 30),
                                 "reference_defaults": timing([3.0] * 30),
                                 "compiled": timing([0.5] * 30), "compiled_defaults": timing([0.4] * 30)})
    assert [(b.name, b.numerics) for b in slower] == [("eager", "ieee"), ("eager", "default"),
                                                      ("torch.compile", "default"), ("torch.compile", "ieee")]
    assert slower[0].speedup == 1.0
    assert [b.key for b in speedups.shown(slower)] == ["reference", "reference_defaults", "compiled_defaults",
                                                       "compiled"]
    same = speedups.baselines({"candidate": timing([1.0] * 30), "reference": timing([3.0] * 30)})
    assert [(b.name, b.numerics) for b in same] == [("eager", "same")]
    # the two numerics within the noise of each other: one line
    close = speedups.baselines({"candidate": timing([1.0] * 30), "reference": timing([3.0] * 30),
                                "reference_defaults": timing([3.0] * 30)})
    assert len(speedups.shown(close)) == 1


def test_both_baselines_are_timed_and_shown_where_the_defaults_change_the_reference(cpu_options):
    result = evaluate(PROBLEMS / "numerics_sensitive.py", CANDIDATES / "py_double.py", cpu_options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    names = [(b.name, b.numerics) for b in result.baselines]
    assert names == [("eager", "default"), ("eager", "ieee")]
    default, ieee = result.baselines
    assert result.speedup == default.speedup and result.speedup_interval == default.interval
    assert ieee.speedup > 3 * default.speedup  # the IEEE path sleeps 2 ms; the default path does not
    for baseline in result.baselines:
        assert baseline.interval[0] <= baseline.speedup <= baseline.interval[1]
    console = Console(record=True, width=160)
    console.print(eval_panel(result))
    text = console.export_text()
    # the slower setting is shown where its interval stands apart (a busy machine widens both)
    shown = [b.label for b in speedups.shown(result.baselines)]
    assert "eager (PyTorch defaults)" in text and "95%" in text and shown[0] == "eager (PyTorch defaults)"
    assert ("eager (IEEE float32)" in text) == ("eager (IEEE float32)" in shown), (shown, text)
    again = from_json(EvalResult, to_json(result))
    assert again.baselines == result.baselines and again.speedup_interval == result.speedup_interval


def test_a_reference_slower_under_the_defaults_does_not_lift_a_copy_above_one(cpu_options, tmp_path):
    """The defaults path of this reference sleeps: the headline is IEEE, which the copy matches."""
    copy = tmp_path / "copy.py"
    copy.write_text(f"import importlib.util\nspec = importlib.util.spec_from_file_location('p', "
                    f"{str(PROBLEMS / 'numerics_slow_defaults.py')!r})\nproblem = importlib.util.module_from_spec(spec)\n"
                    "spec.loader.exec_module(problem)\n\n\nclass ModelNew(problem.Model):\n    pass\n")
    result = evaluate(PROBLEMS / "numerics_slow_defaults.py", copy, cpu_options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    head, other = result.baselines
    assert (head.key, other.key) == ("reference", "reference_defaults")
    assert head.median_ms <= other.median_ms and result.speedup == head.speedup
    assert other.speedup > 3 * head.speedup  # the defaults' 2 ms sleep would have read as the copy's win
    assert "IEEE float32" in result.explanation


def test_replay_judges_a_change_by_the_intervals():
    def result(speedup, interval):
        return EvalResult(Verdict.CORRECT, "", speedup=speedup, speedup_interval=interval)

    same = Replay("r", result(1.50, [1.48, 1.52]), 1.50, result(1.53, [1.51, 1.55]), 0.0, "gpu", "gpu")
    assert same.within_noise  # 2% apart, but the intervals overlap
    moved = Replay("r", result(1.50, [1.49, 1.51]), 1.50, result(1.60, [1.59, 1.61]), 0.5, "gpu", "gpu")
    assert not moved.within_noise  # the IQR-based noise (50%) would have called this noise


@pytest.mark.gpu
def test_work_on_a_stream_the_caller_waits_for_is_timed_queued(cache_dir):
    result = evaluate(PROBLEMS / "small_layernorm.py", CANDIDATES / "waited_side_stream.py",
                      EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=2.0))
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.hidden_work_ms is None
    assert result.speedup_interval[0] <= result.speedup <= result.speedup_interval[1]


def test_a_twin_shifted_beyond_its_noise_widens_every_interval_by_its_shift():
    """Where the reference's parameters sit moves its time; a twin at other addresses that reads
    1% slower, beyond the noise, widens the intervals by 1% each side; one within the noise does not."""
    rng = random.Random(4)
    reference = [rng.gauss(2.0, 0.004) for _ in range(200)]
    moved = [1.01 * t for t in reference]
    noisy = [t + rng.gauss(0.0, 0.004) for t in reference]
    assert speedups.placement_spread(timing(reference), [timing(noisy)]) == 0.0
    spread = speedups.placement_spread(timing(reference), [timing(noisy), timing(moved)])
    assert spread == pytest.approx(0.00995, abs=1e-4)
    # the range among all placements: twins 0.5% either side of the reference span 1%
    either_side = [timing([0.995 * t for t in reference]), timing([1.005 * t for t in reference])]
    assert speedups.placement_spread(timing(reference), either_side) == pytest.approx(0.01, abs=1e-4)
    timings = {"candidate": timing([rng.gauss(1.0, 0.002) for _ in range(200)]), "reference": timing(reference)}
    plain, widened = speedups.baselines(timings)[0], speedups.baselines(timings, spread)[0]
    assert widened.speedup == plain.speedup
    assert widened.interval[0] == pytest.approx(plain.interval[0] / 1.01, rel=1e-3)
    assert widened.interval[1] == pytest.approx(plain.interval[1] * 1.01, rel=1e-3)
    # beyond the bootstrap, never less than the resolution
    low, high = ratio_interval(timings["reference"].samples, timings["candidate"].samples)
    assert plain.interval == pytest.approx([low / (1 + speedups.RESOLUTION), high * (1 + speedups.RESOLUTION)],
                                           rel=1e-6)
    shown = EvalResult(Verdict.CORRECT, "", timings=timings, baselines=[widened], placement_spread=spread)
    assert "widened ±0.1% and ±1.00% for where the parameters sit" in speedups.basis_text(shown)


def test_a_gap_between_the_reference_beside_and_alone_stretches_the_interval_over_both_figures():
    """The reference 20% slower beside the candidate than alone, beyond the noise: the interval reaches down to
    the speedup over the reference alone, and the basis says why; faster beside, it reaches up to it."""
    rng = random.Random(5)
    candidate = timing([rng.gauss(1.0, 0.002) for _ in range(200)])
    beside = timing([rng.gauss(2.4, 0.004) for _ in range(200)])
    alone = timing([rng.gauss(2.0, 0.004) for _ in range(50)])
    timings = {"candidate": candidate, "reference": beside}
    gap = math.log(beside.median / alone.median)
    plain = speedups.baselines(timings)[0]
    slower = speedups.baselines(timings, widen=speedups.widening(gap=gap))[0]
    assert plain.interval[0] > alone.median / candidate.median
    assert slower.interval[0] < alone.median / candidate.median < slower.interval[1] == plain.interval[1]
    faster = speedups.baselines({"candidate": candidate, "reference": alone}, widen=speedups.widening(gap=-gap))[0]
    assert faster.interval[0] < beside.median / candidate.median < faster.interval[1]
    shown = EvalResult(Verdict.CORRECT, "", timings=timings, baselines=[slower], details={"reference_gap": gap})
    assert "lower end -18.23% to cover the reference alone (it ran slower beside" in speedups.basis_text(shown)


def test_the_reference_twins_are_timed_once_per_problem_and_their_spread_recorded(cpu_options):
    """A problem with parameters: the first evaluation times the reference's twins alone beside it
    and records the spread (JSON too); the next candidate of the same evaluator reuses it."""
    from harness.engine.evaluate import Evaluator

    with Evaluator(PROBLEMS / "small_layernorm.py", cpu_options, keep_spare=False) as evaluator:
        first = evaluator.evaluate(CANDIDATES / "py_correct.py")
        measured = dict(evaluator.placement)
        second = evaluator.evaluate(CANDIDATES / "py_correct.py")
    assert first.verdict is Verdict.CORRECT, first.explanation
    assert set(measured) == {""} and first.placement_spread == measured[""]["host"] >= 0.0
    assert second.placement_spread == first.placement_spread and evaluator.placement == measured
    assert not any(key.startswith("placement_") for key in first.timings)
    low, high = first.speedup_interval
    assert low <= first.speedup <= high
    assert from_json(EvalResult, to_json(first)).placement_spread == first.placement_spread


def test_parameters_too_big_to_copy_twice_leave_the_spread_unmeasured_and_say_so(cpu_options, monkeypatch):
    from harness.engine import evaluate as engine
    from harness.engine.processes import footprint
    from harness.loop.feedback import warning_lines

    monkeypatch.setattr(footprint, "PLACEMENT_SHARE", 0.0)  # no room for twins
    monkeypatch.setattr(footprint, "PLACEMENT_FLOOR", 0)
    with engine.Evaluator(PROBLEMS / "small_layernorm.py", cpu_options, keep_spare=False) as evaluator:
        result = evaluator.evaluate(CANDIDATES / "py_correct.py")
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.placement_spread is None and evaluator.placement == {"": {"host": None}}
    said = [w for w in result.warnings if "too big to copy twice" in w]
    assert said and said[0] not in warning_lines(result, frozenset())  # for the person, not the model


def test_twins_hold_the_same_parameters_at_other_addresses():
    import torch

    from harness.engine.processes.footprint import MIN_TWINS, TWINS, twin_count
    from harness.engine.workers.reference import TWIN_PADS_MIB, twins

    assert len(TWIN_PADS_MIB) == TWINS
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64))
    held = sum(t.nbytes for t in model.state_dict().values())
    assert twins(model, torch.device("cpu"), MIN_TWINS * held - 1) == []  # too few fit: none
    assert len(twins(model, torch.device("cpu"), 3 * held)) == twin_count(held, 3 * held) == 3  # as many as fit
    made = twins(model, torch.device("cpu"), 100 * held)
    assert len(made) == TWINS
    for twin in made:
        for (name, mine), theirs in zip(model.state_dict().items(), twin.state_dict().values()):
            assert torch.equal(mine, theirs) and mine.data_ptr() != theirs.data_ptr(), name
    assert twins(torch.nn.ReLU(), torch.device("cpu"), 1 << 30) == []  # nothing to place
