"""Pure parts of the engine: comparison, error extraction, statistics."""
import math
from types import SimpleNamespace

import pytest
import torch

from harness.engine.building.cache import first_errors
from harness.engine.processes.channel import Unsupported
from harness.engine.checking.compare import CHUNK, compare
from harness.engine.checking import trials
from harness.engine.checking.trials import side_by_side
from harness.engine.processes.protocol import Checked, ReferenceReady, TrialMade, TrialOutputs
from harness.results import CheckResult
from harness.engine.options import EvalOptions
from harness.engine.timing import clock
from harness.engine.timing.clock import Entry, StopRule, time_interleaved
from harness.stats import rel_se_of_median, summarize

TOL = lambda dtype: (1e-4, 1e-4)  # noqa: E731


def test_compare_accepts_close_values():
    ref = torch.randn(4, 5)
    result = compare(ref, ref + 1e-6, ["cpu"], TOL)
    assert result.passed and result.max_abs_error < 2e-6


def test_the_relative_error_is_read_only_where_the_reference_is_above_atol():
    """A reference element of 1e-9 beside an error of 1e-7: inside atol, so passing, and not the 100x relative
    error a ratio over it would report; with nothing above atol, no relative error at all."""
    ref = torch.tensor([1.0, 2.0, 1e-9])
    result = compare(ref, ref + torch.tensor([1e-6, 0.0, 1e-7]), ["cpu"], TOL)
    assert result.passed and result.max_rel_error == pytest.approx(1e-6, rel=0.1)  # float32 rounding
    tiny = torch.full((4,), 1e-9)
    assert compare(tiny, tiny + 1e-7, ["cpu"], TOL).max_rel_error == 0.0


def test_compare_reports_first_bad_index_and_share():
    ref = torch.zeros(3, 4)
    cand = ref.clone()
    cand[1, 2] = 1.0
    cand[2, 3] = 1.0
    result = compare(ref, cand, ["cpu"], TOL)
    assert not result.passed
    assert result.first_bad_index == [1, 2]
    assert math.isclose(result.mismatch_share, 2 / 12)


def test_compare_flags_shape_dtype_device_and_count():
    ref = torch.randn(2, 3)
    assert "shape" in compare(ref, torch.randn(3, 2), ["cpu"], TOL).reasons[0]
    assert "dtype" in compare(ref, ref.double(), ["cpu"], TOL).reasons[0]
    assert "device" in compare(ref, ref, ["cuda:0"], TOL).reasons[0]
    assert "expected 1 output" in compare(ref, (ref, ref), ["cpu", "cpu"], TOL).reasons[0]
    assert "plain torch.Tensor" in compare(ref, Unsupported("LazyTensor"), [], TOL).reasons[0]


def test_compare_flags_nonfinite_where_reference_is_finite():
    ref = torch.ones(5)
    cand = ref.clone()
    cand[3] = float("nan")
    result = compare(ref, cand, ["cpu"], TOL)
    assert not result.passed
    assert any("non-finite" in r for r in result.reasons)


def test_first_errors_prefers_compiler_lines():
    log = "\n".join([
        "Traceback (most recent call last):",
        "RuntimeError: Error building extension 'x': [1/2] nvcc ...",
        "/tmp/build/x/cuda.cu(12): error: identifier \"blockDimx\" is undefined",
        "      int i = blockDimx * 2;",
        "              ^",
        "ninja: build stopped: subcommand failed.",
    ])
    lines = first_errors(log)
    assert lines[0] == 'cuda.cu(12): error: identifier "blockDimx" is undefined'
    assert "ninja" not in "\n".join(lines)


def test_first_errors_falls_back_to_the_exception():
    log = "Traceback (most recent call last):\n  File \"c.py\", line 3\nTypeError: load_inline() got an unexpected keyword argument 'extra_cuda_flags'\n"
    assert first_errors(log) == ["TypeError: load_inline() got an unexpected keyword argument 'extra_cuda_flags'"]


def test_stopping_statistic_shrinks_with_samples():
    noisy = [1.0 + 0.1 * ((i * 7919) % 13 - 6) / 6 for i in range(400)]
    assert rel_se_of_median(noisy[:10]) > rel_se_of_median(noisy)
    assert rel_se_of_median([1.0, 1.0]) == math.inf
    summary = summarize(noisy, "perf_counter", noisy)
    assert summary.samples == noisy  # kept in round order, for the paired interval
    assert summary.n == 400 and summary.min <= summary.median and summary.iqr > 0


def test_host_submit_time_is_the_call_alone():
    """The host's time until the call returned is kept apart from the whole sample."""
    import time

    def slow_to_submit():
        time.sleep(0.004)
        return torch.ones(1)

    timings = time_interleaved({"slow": Entry(lambda seed: [], slow_to_submit),
                                "quick": Entry(lambda seed: [], lambda: torch.ones(1))},
                               torch.device("cpu"), StopRule(min_samples=5, max_samples=5, warmup_calls=1))
    assert list(timings) == ["host"]  # one clock on a CPU
    slow, quick = timings["host"]["slow"], timings["host"]["quick"]
    assert slow.clock == quick.clock == "host"
    assert 4.0 <= slow.submit_median and 4.0 <= slow.median
    assert quick.submit_median < 1.0


def test_parameters_are_matched_by_shape_then_by_size():
    from harness.engine.workers.common import copy_parameters, randomize_parameters

    reference = torch.nn.Sequential(torch.nn.LayerNorm((4, 8)))
    randomize_parameters(reference, seed=1)
    assert not torch.equal(reference[0].weight, torch.ones(4, 8))  # moved off its init

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(32))
            self.bias = torch.nn.Parameter(torch.zeros(32))
            self.extra = torch.nn.Parameter(torch.zeros(3))

    flat = Flat()
    warnings, matched = copy_parameters(reference, flat)
    assert torch.equal(flat.weight, reference[0].weight.reshape(-1))
    assert torch.equal(flat.bias, reference[0].bias.reshape(-1))
    assert len(warnings) == 1 and "extra" in warnings[0]
    assert matched[0] is flat.weight and matched[1] is flat.bias  # per reference parameter, for --backward


def test_gpu_results_show_host_submit_and_cpu_results_do_not():
    from rich.console import Console

    from harness.cli.eval_panel import eval_panel
    from harness.results import EvalResult, Timing, Verdict, from_json, to_json

    def shown(method: str) -> str:
        timing = Timing(median=0.3, iqr=0.01, mean=0.31, min=0.29, n=50, rel_se=0.005, method=method,
                        overhead=0.02, submit_median=0.0123)
        result = EvalResult(Verdict.CORRECT, "timed", timings={"candidate": timing, "reference": timing})
        assert from_json(EvalResult, to_json(result)).timings["candidate"].submit_median == 0.0123
        console = Console(record=True, width=160)
        console.print(eval_panel(result))
        return console.export_text()

    assert "host submit ms" in shown("cuda_events") and "0.0123" in shown("cuda_events")
    assert "host submit" not in shown("perf_counter")


def test_models_are_built_on_their_device_or_else_on_the_cpu():
    """On a GPU the constructor runs under the device (the meta device stands in for it here);
    one that cannot run there is run again on the CPU from the same seed."""
    from harness.engine.workers.common import build_model

    linear = build_model(torch.nn.Linear, [8, 4], 7, torch.device("meta"))
    assert linear.weight.device.type == "meta"

    class NeedsHostTensors(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.table = torch.arange(n).numpy().tolist()  # fails on any device but the CPU
            self.weight = torch.nn.Parameter(torch.randn(n))

    built = build_model(NeedsHostTensors, [5], 7, torch.device("meta"))
    again = build_model(NeedsHostTensors, [5], 7, torch.device("cpu"))
    assert built.weight.device.type == "cpu" and built.table == list(range(5))
    assert torch.equal(built.weight, again.weight)  # the same seed, whichever way it was built


def test_parameters_are_randomized_in_chunks_alike_in_every_build(monkeypatch):
    from harness.engine.workers import common

    monkeypatch.setattr(common, "NOISE_CHUNK", 7)  # a 5x6 weight in five parts, the last one short

    def build():
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 5)
        model.weight = torch.nn.Parameter(torch.ones(6, 5).t())  # not contiguous: drawn in one part
        common.randomize_parameters(model, seed=3)
        return model

    first, second = build(), build()
    assert torch.equal(first.weight, second.weight) and torch.equal(first.bias, second.bias)
    assert (first.weight != 1).all()  # every part moved, the short last one too
    flat = torch.nn.Linear(6, 5)
    init = flat.weight.detach().clone()
    common.randomize_parameters(flat, seed=3)
    assert (flat.weight != init).all()


def test_compare_reads_every_slice_of_a_big_output():
    ref = torch.zeros(2 * CHUNK + 3)
    cand = ref.clone()
    cand[CHUNK + 5], cand[2 * CHUNK + 1], cand[7] = 2.0, float("nan"), 1e-5  # the last within tolerance
    result = compare(ref, cand, ["cpu"], TOL)
    assert not result.passed and result.first_bad_index == [CHUNK + 5]
    assert result.max_abs_error == 2.0 and result.mismatch_share == 2 / ref.numel()
    assert "1 non-finite value(s)" in result.reasons[0] and "differs from the reference in 2 of" in result.reasons[1]
    ints = torch.arange(10)
    result = compare(ints, torch.where(ints == 3, 7, ints), ["cpu"], lambda dtype: (0, 0))
    assert result.first_bad_index == [3] and result.max_abs_error == 4.0 and result.max_rel_error == 0.0


def test_trials_run_side_by_side_only_where_the_memory_holds_both():
    gib = 1 << 30

    def children(available: int) -> SimpleNamespace:
        return SimpleNamespace(reference_info=ReferenceReady(input_bytes=gib, output_bytes=gib,
                                                             available_bytes=available))

    # one evaluation holds 5 GiB at most (two input draws, three outputs)
    assert side_by_side(children(80 * gib))
    assert not side_by_side(children(8 * gib))  # the reference gives the device back first
    assert not side_by_side(children(0))  # not known


class ScriptedTrials:
    """What checking/trials.check talks to: every trial's inputs agree and its outputs match; the requests
    to both processes, and the fields the harness adds to each comparison it relays, are kept."""

    def __init__(self, available: int):
        gib = 1 << 30
        self.reference_info = ReferenceReady(input_bytes=gib, output_bytes=gib, available_bytes=available,
                                             reproducible=True)
        self.to_reference, self.to_worker, self.relayed = [], [], []
        self.reference = SimpleNamespace(send=self.to_reference.append,
                                         forward=lambda message, **extra: self.relayed.append(extra))
        self.worker = SimpleNamespace(send=self.to_worker.append)
        self.options = EvalOptions()

    def run_deadline(self):
        return None

    def reference_says(self, deadline, kind, doing):
        return TrialMade(seed=1, checksum=[7]) if kind is TrialMade else Checked(check=CheckResult(True))

    def talk(self, worker, deadline, doing, kind, raw=False):
        # the candidate's own header asks to keep the cache: only the harness's word counts
        return TrialOutputs(checksum=[7]), {"keep_cache": True}


def test_side_by_side_trials_keep_what_they_free_until_the_last_comparison():
    """Run at once, both processes' trial peaks are counted together anyway: neither gives memory back to the
    device between trials (5-10 ms a step on a multi-GB output), and the last comparison does. One by one,
    each step gives it back, for the other process's turn."""
    roomy = ScriptedTrials(80 << 30)
    assert trials.check(roomy, roomy.worker, 3, []).trials == 3
    assert [m["keep_cache"] for m in roomy.to_reference + roomy.to_worker] == [True] * 6
    assert [extra["keep_cache"] for extra in roomy.relayed] == [True, True, False]
    tight = ScriptedTrials(8 << 30)
    trials.check(tight, tight.worker, 3, [])
    assert not any(m["keep_cache"] for m in tight.to_reference + tight.to_worker)
    assert [extra["keep_cache"] for extra in tight.relayed] == [False] * 3


def test_a_cpu_flush_is_twice_its_l3_and_bounded(monkeypatch):
    """A guest may report its host's whole L3: the flush before every sample stays bounded."""
    cpu = torch.device("cpu")
    monkeypatch.setattr(clock, "_cpu_cache_bytes", lambda: 32 << 20)
    assert clock.flush_bytes(cpu) == 64 << 20
    monkeypatch.setattr(clock, "_cpu_cache_bytes", lambda: 480 << 20)
    assert clock.flush_bytes(cpu) == clock.CPU_FLUSH_MAX_BYTES < 960 << 20


def test_a_bar_is_cleared_by_the_speedup_a_result_is_sure_of():
    from harness.results import assured, clears

    assert clears(2.1, [2.01, 2.2], 2.0) and not clears(2.1, [1.9, 2.3], 2.0)
    assert clears(2.1, None, 2.0) and not clears(1.99, None, 2.0)  # no interval: the reading itself
    nan = float("nan")
    assert assured(2.1, [nan, nan]) == 2.1 and assured(2.1, [1.9, 2.3]) == 1.9


def _timed(outputs_per_call: list) -> tuple[list, list]:
    """What a candidate's worker sends after timing calls with these outputs (seeds 0, 1, ...)."""
    from harness.integrity.recheck import TimedOutputs
    observed = TimedOutputs(torch.device("cpu"))
    for seed, output in enumerate(outputs_per_call):
        observed.observe(seed, output)
    return observed.message()


def _outputs(seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(64, 70, generator=generator), torch.randn(5, generator=generator)]


def test_the_recheck_passes_every_call_that_matches_the_reference():
    from harness.integrity.recheck import verify_timed
    samples, tensors = _timed([tuple(_outputs(seed)) for seed in range(6)])
    result, failed = verify_timed(samples, tensors, _outputs, {"default": (1e-5, 1e-5)})
    assert result.passed and result.trials == 6 and not result.reasons and failed == []


def test_the_recheck_names_the_first_wrong_call_and_counts_them_all():
    from harness.integrity.recheck import verify_timed
    calls = [tuple(_outputs(seed)) for seed in range(6)]
    calls[2] = (calls[2][0], calls[2][1] + 1)  # the second output wrong in calls 3 and 5 (of 6)
    calls[4] = (calls[4][0], calls[4][1] + 1)
    samples, tensors = _timed(calls)
    result, failed = verify_timed(samples, tensors, _outputs, {"default": (1e-5, 1e-5)})
    assert not result.passed and result.failed_trial == 3 and result.mismatch_share == 2 / 6 and failed == [2, 4]
    assert result.reasons == ["2 of 6 timed calls returned wrong outputs (first, call 3: output 1 differs from "
                              "the reference)"]


def test_the_recheck_names_a_call_whose_outputs_are_not_the_references_shape_or_count():
    from harness.integrity.recheck import verify_timed
    calls = [tuple(_outputs(seed)) for seed in range(3)]
    samples, tensors = _timed([calls[0], calls[1], (calls[2][0], calls[2][1][:4])])
    result = verify_timed(samples, tensors, _outputs, {"default": (1e-5, 1e-5)})[0]
    assert not result.passed and result.failed_trial == 3
    assert "output 1 has shape [4] and dtype float32" in result.reasons[0]
    samples, tensors = _timed([calls[0][0]] * 2)
    result = verify_timed(samples, tensors, _outputs, {"default": (1e-5, 1e-5)})[0]
    assert not result.passed and result.failed_trial == 1
    assert "it returned 1 output(s) where the reference returns 2" in result.reasons[0]


def test_input_digests_name_each_input_changed_in_place_and_only_those():
    from harness.integrity.digest import changed, digest

    inputs = [torch.randn(5000), 3, torch.arange(10, dtype=torch.int64), torch.zeros(0), torch.ones(7)]
    before = digest(inputs)
    assert changed(before, digest(inputs)) == []
    inputs[0][4321] += 1.0  # one element of the first
    inputs[4].resize_(3)  # a resize in place: a digest of another shape
    assert changed(before, digest(inputs)) == [0, 4]
    assert changed([1, "a"], [2, "b"]) == []  # what is not a tensor is not the digest's to compare


def test_other_input_distributions_move_floating_point_tensors_alone_and_the_same_way_twice():
    import torch

    from harness.integrity.distributions import DISTRIBUTIONS, moved, named

    x, index = torch.tensor([0.2, -0.7, 1.5]), torch.tensor([1, 2])
    assert torch.equal(moved([x, index, 3], "large")[0], x * 1000) and moved([x, index, 3], "large")[1:] == [index, 3]
    assert torch.equal(moved([x], "shifted")[0], x + 100)
    assert moved([x], "zeros")[0].tolist() == [0.0, -0.699999988079071, 1.5]
    assert torch.equal(moved([x], "small")[0], moved([x], "small")[0]) and moved([x], "")[0] is x
    assert [d.name for d in DISTRIBUTIONS] == ["large", "small", "shifted", "zeros"]
    with pytest.raises(KeyError, match="large, small, shifted, zeros"):
        named("huge")
