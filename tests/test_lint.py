"""The problem lint: outputs a candidate could fake without doing the work."""
import importlib.util

import pytest
import torch
import torch.nn as nn

from conftest import PROBLEMS
from harness.integrity.lint import lint_reference


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lint_problem(path, **kwargs) -> list[str]:
    problem = load(path)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs())
    return lint_reference(model, problem.get_inputs, **kwargs)


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def randn(*shape):
    return lambda: [torch.randn(*shape)]


@pytest.mark.parametrize("path", [PROBLEMS / "small_layernorm.py", PROBLEMS / "row_loop.py"], ids=lambda p: p.stem)
def test_healthy_problems_get_no_warning(path):
    assert lint_problem(path) == []


def test_degenerate_problem_is_the_same_value_everywhere():
    (warning,) = lint_problem(PROBLEMS / "degenerate_softmax.py")
    assert warning.startswith("The output is the same value everywhere (1)")


@pytest.mark.parametrize("fn, says", [
    (lambda x: torch.clamp(x, min=20.0), "is the same value everywhere (20)"),
    (lambda x: 1000.0 + 1e-3 * torch.tanh(x), "is nearly the same value everywhere"),  # within rtol
    (lambda x: 1.0 + 1e-5 * x.sign(), "is nearly the same value everywhere"),  # below atol
    (lambda x: 1e4 + x, "std only"),  # barely varies, though more than the tolerances allow
])
def test_almost_constant_outputs(fn, says):
    (warning,) = lint_reference(Fn(fn), randn(64, 32))
    assert says in warning


def test_output_that_ignores_the_inputs():
    weight = torch.randn(64, 32)
    (warning,) = lint_reference(Fn(lambda x: weight + 0 * x), randn(64, 32))
    assert warning.startswith("The output barely depends on the inputs: 3 random input draws")


def test_output_that_depends_on_the_inputs_only_a_little_is_fine():
    weight = torch.randn(64, 32)
    assert lint_reference(Fn(lambda x: weight + 1e-2 * x), randn(64, 32)) == []


def test_non_finite_outputs():
    (warning,) = lint_reference(Fn(torch.log), randn(64, 32))  # log of negative values
    assert "non-finite value(s) of 2048" in warning


def test_inputs_that_never_change():
    warnings = lint_reference(Fn(torch.tanh), lambda: [torch.ones(8, 8).cumsum(0)])
    assert warnings == ["get_inputs() gave the same inputs on 3 draws from different seeds: every trial checks "
                        "the same case."]


def test_each_output_is_named_and_its_dtype_tolerance_used():
    weight = torch.randn(16)
    model = Fn(lambda x: (x * 2, (weight + 1e-3 * x.sum()).half()))
    tolerances = {"default": (1e-4, 1e-4), "float16": (1e-2, 1e-2)}
    (warning,) = lint_reference(model, randn(16), tolerances=tolerances)
    assert warning.startswith("Output 1 barely depends on the inputs") and "atol=0.01" in warning
    assert lint_reference(model, randn(16)) == []  # at float32's tolerance output 1 does vary


def test_integer_outputs():
    assert lint_reference(Fn(lambda x: (x > 0).long()), randn(64, 32)) == []
    (warning,) = lint_reference(Fn(lambda x: torch.zeros(4, dtype=torch.long) + 0 * x[:4].long()), randn(64))
    assert "the same value everywhere (0)" in warning


def test_checks_over_many_slices_count_and_compare_every_slice(monkeypatch):
    """Identity and finiteness are read a slice at a time (a GPU's temporaries would be the size of a
    multi-GB output): a difference, or a non-finite value, in the last slice still counts."""
    from harness.integrity import lint

    monkeypatch.setattr(lint, "CHUNK", 7)
    a = torch.randn(10, 5)
    b = a.clone()
    assert lint.identical(a, b)
    b[-1, -1] += 1
    assert not lint.identical(a, b)
    a[-1, -1], b[-1, -1] = float("nan"), float("nan")
    assert lint.identical(a, b)  # NaN where NaN
    assert not lint.identical(a, b.reshape(5, 10))
    x = torch.randn(10, 5)
    y = x.clone()
    assert lint._close(x, y, (1e-4, 1e-4))
    y[-1, -1] += 1
    assert not lint._close(x, y, (1e-4, 1e-4))  # the last slice's difference counts
    x[0, 0] = y[0, 0] = float("nan")
    y[-1, -1] = x[-1, -1]
    assert lint._close(x, y, (1e-4, 1e-4))  # NaN where NaN
    assert lint._close(torch.empty(0), torch.empty(0), (1e-4, 1e-4))
    (warning,) = lint_reference(Fn(torch.log), randn(64, 32))
    assert "non-finite value(s) of 2048" in warning
    x = torch.randn(64, 32)
    count = int((~torch.isfinite(torch.log(x))).sum())
    assert lint._value_warnings("The output", torch.log(x), (1e-4, 1e-4))[0].startswith(
        f"The output holds {count} non-finite value(s) of 2048")


def test_the_problem_lint_runs_once_after_the_first_verdict_and_each_result_says_it_once(cpu_options, tmp_path):
    """Not in the load, which every problem's first check waits for: after the first candidate's verdict,
    whatever it is, once per reference process."""
    from harness import Evaluator, Verdict

    problem = PROBLEMS / "degenerate_softmax.py"
    wrong, copy = tmp_path / "wrong.py", tmp_path / "copy.py"
    wrong.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    def forward(self, x):\n"
                                           "        return super().forward(x) * 2\n")
    copy.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    with Evaluator(problem, cpu_options) as evaluator:
        evaluator.start_reference()
        assert "lint" not in evaluator.reference_info.load_seconds and evaluator.problem_warnings == []
        first, second = evaluator.evaluate(wrong), evaluator.evaluate(copy)
        linted = evaluator.reference_info.load_seconds["lint"]
    assert (first.verdict, second.verdict) == (Verdict.INCORRECT, Verdict.CORRECT), second.explanation
    for result in (first, second):
        assert sum("the same value everywhere" in w for w in result.warnings) == 1, result.warnings
    assert linted >= 0


def test_the_checks_first_trials_are_the_lints_draws(cpu_options, tmp_path, monkeypatch):
    """checking/trials.py's lint_in_trials: where the check has three trials, the lint after it draws
    nothing of its own and says what its own draws say (--trials 2: they are its own)."""
    import dataclasses

    from harness.engine.children import Children
    from harness.engine.evaluate import evaluate

    draws = tmp_path / "draws.txt"  # a line for each get_inputs(), whichever process calls it
    problem = tmp_path / "constant.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x * 0 + 1\n\n"
        f"def get_inputs():\n    with open({str(draws)!r}, 'a') as f:\n        f.write('x\\n')\n"
        "    return [torch.randn(64, 64)]\n\n"
        "def get_init_inputs():\n    return []\n")
    candidate = tmp_path / "copy.py"
    candidate.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    drawn_by_lint = []
    lint_problem = Children.lint_problem

    def counted(self):
        before = len(draws.read_text().splitlines())
        due, said = self.lint_due, lint_problem(self)
        if due:
            drawn_by_lint.append(len(draws.read_text().splitlines()) - before)
        return said

    monkeypatch.setattr(Children, "lint_problem", counted)
    said = []
    for trials in (5, 2):
        options = dataclasses.replace(cpu_options, trials=trials, shapes="off", time_cap=0.1, min_samples=2)
        result = evaluate(problem, candidate, options)
        assert result.verdict.value == "correct", result.explanation
        said.append([w for w in result.warnings if "same value everywhere" in w])
    assert drawn_by_lint == [0, 3]
    assert said[0] == said[1] and len(said[0]) == 1, said
