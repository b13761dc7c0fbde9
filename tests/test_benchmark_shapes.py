"""Timing at a problem's declared benchmark shapes: the speedup is the geometric mean over them."""
import dataclasses
import math

import pytest
from rich.console import Console

from conftest import PROBLEMS
from harness import Evaluator, Verdict, from_json, to_json
from harness.cli.eval_panel import eval_panel
from harness.loop.feedback import Thresholds, feedback_context
from harness.problem import ProblemError
from harness.results import EvalResult

TANH_ROWS = PROBLEMS / "tanh_rows.py"

CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.tanh(x).mul_(self.scale)
'''

# right at the main shape and at batch 16, wrong where rows are longer
SHORT_ROWS_ONLY = CANDIDATE.replace("return torch.tanh(x).mul_(self.scale)",
                                    "return torch.tanh(x).mul_(self.scale) if x.shape[-1] <= 64 else torch.tanh(x)")


def test_speedup_is_the_geometric_mean_over_the_benchmark_shapes(cpu_options, tmp_path):
    candidate, wrong = tmp_path / "tanh.py", tmp_path / "short_rows.py"
    candidate.write_text(CANDIDATE)
    wrong.write_text(SHORT_ROWS_ONLY)
    options = dataclasses.replace(cpu_options, time_cap=0.4)
    with Evaluator(TANH_ROWS, options) as evaluator:
        result = evaluator.evaluate(candidate)
        failed = evaluator.evaluate(wrong)  # the reference process went back to the main shape after the first
    assert result.verdict is Verdict.CORRECT, result.explanation
    shapes = result.benchmark_shapes
    assert [s.values for s in shapes] == [{"batch_size": 16}, {"batch_size": 256, "dim": 128}]
    assert all(s.n >= options.min_samples and s.candidate_ms > 0 for s in shapes)
    per_shape = [s.baselines[0].median_ms / s.candidate_ms for s in shapes]
    assert result.speedup == pytest.approx(math.prod(per_shape) ** (1 / len(per_shape)))
    low, high = result.speedup_interval
    assert low <= result.speedup <= high
    assert "Geometric mean over 2 benchmark shapes" in result.explanation
    # the main shape is not one of them: the timings shown are the first benchmark shape's
    assert result.timed_shape == "batch_size=16"
    assert result.roofline is None
    back = from_json(EvalResult, to_json(result))
    assert back.benchmark_shapes == shapes and back.benchmark_shapes[1].speedup == shapes[1].speedup

    console = Console(record=True, width=200)
    console.print(eval_panel(result))
    panel = console.export_text()
    assert "geometric mean over 2 benchmark shapes" in panel
    assert "batch_size=16: " in panel and "batch_size=256, dim=128: " in panel
    line = feedback_context(1, result, Thresholds(), [])["speedup_line"]
    assert line.startswith("geometric mean over 2 benchmark shapes: ") and "batch_size=256, dim=128: " in line

    assert failed.verdict is Verdict.INCORRECT, failed.explanation
    assert "Trial 1" in failed.explanation and "(at benchmark shape batch_size=256, dim=128)" in failed.explanation
    assert [s.values for s in failed.benchmark_shapes] == [{"batch_size": 16}]  # timed there, then refused


@pytest.mark.parametrize("declaration, said", [
    ('{"batch_size": 16}', "it returned a dict"),
    ('[{}, ("batch_size", 16)]', "a tuple"),
    ('[{"batchsize": 16}]', "names 'batchsize', which the problem does not define"),
    ("[]", "returned no shape to time at"),
])
def test_bad_declaration_is_refused_naming_the_file(cpu_options, tmp_path, declaration, said):
    problem = tmp_path / "bad_shapes.py"
    source = TANH_ROWS.read_text()
    problem.write_text(source[:source.index("def get_benchmark_shapes")]
                       + f"def get_benchmark_shapes():\n    return {declaration}\n")
    with pytest.raises(ProblemError) as refused, Evaluator(problem, cpu_options) as evaluator:
        evaluator.start_reference()
    message = str(refused.value)
    assert str(problem) in message and "get_benchmark_shapes()" in message and said in message
    assert "\n" not in message
