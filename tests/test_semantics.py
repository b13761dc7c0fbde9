"""KernelBench's semantics: the mode models run in, module state, random references, and
problems too big for their device."""
import dataclasses

import pytest

from conftest import CANDIDATES, PROBLEMS
from harness.engine.evaluate import Evaluator, evaluate
from harness.engine.processes.footprint import DoesNotFit
from harness.results import Verdict

BATCHNORM = PROBLEMS / "batchnorm_train.py"


@pytest.mark.parametrize("mode, batch_stats, affine", [("train", Verdict.CORRECT, Verdict.INCORRECT),
                                                       ("eval", Verdict.INCORRECT, Verdict.CORRECT)])
def test_batchnorm_is_judged_in_the_mode_asked_for(cpu_options, mode, batch_stats, affine):
    options = dataclasses.replace(cpu_options, model_mode=mode, trials=3, time_cap=0.2, min_samples=2)
    with Evaluator(BATCHNORM, options) as evaluator:
        by_stats = evaluator.evaluate(CANDIDATES / "batchnorm_batch_stats.py")
        by_running = evaluator.evaluate(CANDIDATES / "batchnorm_affine.py")
    assert (by_stats.verdict, by_running.verdict) == (batch_stats, affine), (by_stats.explanation,
                                                                             by_running.explanation)
    assert by_stats.model_mode == mode
    # running statistics evolve alike in both processes: a copy of Model passes on every trial
    # although the reference process called its model more often (load, lint)
    if mode == "train":
        assert not any("random" in w for w in by_stats.warnings)


def test_a_copy_of_a_stateful_reference_passes_every_check_trial(cpu_options, tmp_path):
    """Forward changes a buffer that the output reads: trial k must be the same call for both,
    although the reference process called its model more often (load, lint). (Timing calls the
    models without restoring, so the re-check of timed calls still tells a call counter.)"""
    problem = tmp_path / "counter.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.register_buffer('calls', torch.zeros(1))\n\n"
        "    def forward(self, x):\n        self.calls += 1\n        return x * self.calls\n\n"
        "def get_inputs():\n    return [torch.randn(16, 16)]\n\n"
        "def get_init_inputs():\n    return []\n")
    candidate = tmp_path / "copy.py"
    candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    result = evaluate(problem, candidate, dataclasses.replace(cpu_options, trials=3, time_cap=0.2, min_samples=2))
    assert result.check.passed and result.check.trials == 3, result.explanation


def test_a_reference_that_draws_random_numbers_is_named_at_load(cpu_options):
    with Evaluator(PROBLEMS / "dropout_train.py", cpu_options) as evaluator:
        evaluator.start_reference()
        trained = evaluator.problem_warnings
    assert any("draws random numbers" in w and "--model-mode eval" in w for w in trained), trained
    with Evaluator(PROBLEMS / "dropout_train.py", dataclasses.replace(cpu_options, model_mode="eval")) as evaluator:
        evaluator.start_reference()
        assert not any("random" in w for w in evaluator.problem_warnings), evaluator.problem_warnings


def test_a_problem_larger_than_the_memory_limit_is_refused_before_any_trial(cpu_options):
    options = dataclasses.replace(cpu_options, memory_limit=1 << 20)
    with Evaluator(PROBLEMS / "small_layernorm.py", options) as evaluator:
        with pytest.raises(DoesNotFit) as refused:
            evaluator.start_reference()
    text = str(refused.value)
    assert "small_layernorm.py does not fit" in text and "needs about" in text and "inputs " in text
    assert "kept copies" in text and "has 0.00105 GB (the limit given)" in text, text
    assert "\n" not in text


MB = 1 << 20
# what a process holds besides the problem's tensors: torch itself (~220 MB resident), the
# temporaries of the digest, the lint and the comparison (a few slices of 16M elements), the
# timing's cache-flush buffer
MARGIN = 400 * MB
REFERENCE_MARGIN = 600 * MB


def test_the_engine_keeps_no_copy_it_does_not_need(cpu_options, tmp_path):
    """Peak resident memory per process: the candidate worker holds one input draw and, timing, each entry's
    last output beside a call's (an output handed out twice is seen: the candidate's and, on a CPU, the
    reference's timed there too), the reference process one draw, its outputs and the candidate's (or, timing,
    two of its own);
    on the numerics check's trial, its outputs beside the draw and the outputs in float64 (twice as big
    each), the float32 draw gone first."""
    candidate = tmp_path / "relu.py"
    candidate.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                         "    def forward(self, x):\n        return torch.relu(x)\n")
    options = dataclasses.replace(cpu_options, trials=1, time_cap=0.1, min_samples=1)
    result = evaluate(PROBLEMS / "big_relu.py", candidate, options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    size = (1 << 26) * 4  # the input, and the output likewise
    peaks = result.details["peak_memory"]
    assert peaks["candidate_worker"]["host"] <= 4 * size + MARGIN, peaks
    assert peaks["reference"]["host"] <= 5 * size + REFERENCE_MARGIN, peaks
