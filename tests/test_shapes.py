"""Correctness at other shapes: variants derived from a KernelBench-style problem's
module-level ints, checked in the worker processes after the main shape is timed."""
import dataclasses

import pytest

from conftest import CANDIDATES, PROBLEMS
from harness import Evaluator, Verdict, from_json, to_json
from harness.loop.feedback import Thresholds, feedback_context
from harness.problem import derived_shapes, shape_names
from harness.results import EvalResult

ROWS = PROBLEMS / "kb_rows.py"
FIXED = CANDIDATES / "cpp_fixed_rows.py"

GENERAL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
        return e / e.sum(dim=-1, keepdim=True) * self.scale
'''


def test_variants_derived_from_module_ints():
    assert shape_names(ROWS.read_text()) == ["batch_size", "dim"]
    variants = derived_shapes({"batch_size": 6, "dim": 32})
    assert variants == [{"batch_size": 3, "dim": 16}, {"batch_size": 3, "dim": 15},
                        {"batch_size": 1, "dim": 1}, {"batch_size": 3, "dim": 3}]
    assert all(v[k] <= m for v in variants for k, m in {"batch_size": 6, "dim": 32}.items())
    # an int the input functions do not read is no shape
    assert shape_names("eps = 3\nn = 4\ndef get_inputs():\n    return [n]\ndef get_init_inputs():\n    return []\n") \
        == ["n"]


def test_hard_coded_row_length_fails_at_other_shapes(cpu_options, tmp_path):
    general = tmp_path / "general.py"
    general.write_text(GENERAL)
    with Evaluator(ROWS, cpu_options) as evaluator:
        fixed = evaluator.evaluate(FIXED)
        right = evaluator.evaluate(general)  # the reference process went back to the main shape
    assert fixed.verdict is Verdict.CORRECT, fixed.explanation  # the main shape is still the task
    assert [s.label for s in fixed.failed_shapes] == ["batch_size=3, dim=16", "batch_size=3, dim=15",
                                                     "batch_size=1, dim=1", "batch_size=3, dim=3"]
    assert any("incorrect at 4 of 4 other shape(s)" in w and "batch_size=3, dim=15" in w for w in fixed.warnings)
    assert fixed.timings["candidate"].n >= 5
    assert right.verdict is Verdict.CORRECT, right.explanation
    assert len(right.shapes) == 4 and all(s.passed for s in right.shapes)
    assert not any("other shape" in w for w in right.warnings)
    # the loop's feedback names the failing shapes
    assert any("batch_size=3, dim=15" in w for w in feedback_context(1, fixed, Thresholds(), [])["warnings"])
    back = from_json(EvalResult, to_json(fixed))
    assert back.shapes == fixed.shapes and back.shapes[0].passed is False


def test_shapes_strict_rejects_and_off_skips(cpu_options):
    with Evaluator(ROWS, dataclasses.replace(cpu_options, shapes="strict")) as evaluator:
        strict = evaluator.evaluate(FIXED)
    assert strict.verdict is Verdict.INCORRECT
    assert "not at 4 other shape(s)" in strict.explanation and "batch_size=1, dim=1" in strict.explanation
    with Evaluator(ROWS, dataclasses.replace(cpu_options, shapes="off")) as evaluator:
        off = evaluator.evaluate(FIXED)
    assert off.verdict is Verdict.CORRECT and off.shapes == []


SECOND_CALL_WRONG = GENERAL.replace("        e = torch.exp", """        self.calls = getattr(self, "calls", 0) + 1  # this shape's model: built afresh at each
        if self.calls == 2 and x.shape[-1] != 32:
            return torch.zeros_like(x)
        e = torch.exp""")


def test_one_trial_a_shape_where_it_warns_two_where_it_is_the_verdict(cpu_options, tmp_path):
    candidate = tmp_path / "second_call_wrong.py"
    candidate.write_text(SECOND_CALL_WRONG)
    with Evaluator(ROWS, cpu_options) as evaluator:
        warned = evaluator.evaluate(candidate)
    assert warned.verdict is Verdict.CORRECT, warned.explanation
    assert len(warned.shapes) == 4 and all(s.passed for s in warned.shapes)
    with Evaluator(ROWS, dataclasses.replace(cpu_options, shapes="strict")) as evaluator:
        strict = evaluator.evaluate(candidate)
    assert strict.verdict is Verdict.INCORRECT and "not at 4 other shape(s)" in strict.explanation


def test_declared_variants_and_a_shape_the_reference_cannot_run(cpu_options, tmp_path):
    problem = tmp_path / "declared.py"
    problem.write_text(ROWS.read_text() + '''

def get_shape_variants():
    return [{"dim": 8}, {"batch_size": 2, "dim": 0}]


_forward = Model.forward
Model.forward = lambda self, x: _forward(self, x) if x.shape[-1] else 1 / 0
''')
    with Evaluator(problem, cpu_options) as evaluator:
        result = evaluator.evaluate(FIXED)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert [(s.label, s.passed) for s in result.shapes] == [("dim=8", False), ("batch_size=2, dim=0", None)]
    assert "reference cannot be built there" in result.shapes[1].reason
