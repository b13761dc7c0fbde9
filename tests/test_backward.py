"""--backward on the CPU: forward and backward checked and timed as one call, each gradient named
where it fails; recorded in sweep records and kept on --resume."""
import dataclasses
import os
import subprocess
import sys

import pytest

from conftest import CANDIDATES, PROBLEMS, REPO
from harness import Verdict, evaluate, evaluate_batch
from harness.results import tolerance_text
from harness.cli.sweep import _backward_as_recorded
from harness.engine.children import NoBackward
from harness.sweep.jobs import SuiteError
from harness.sweep.records import PROBLEM_ERROR, SKIPPED, SweepRecord, read_records
from harness.sweep.summary import summarize

RMSNORM = PROBLEMS / "rmsnorm_train_small.py"
CHECKED = ["backward_cpp_rmsnorm", "backward_wrong_weight_grad", "backward_missing_input_grad"]


@pytest.fixture(scope="module")
def results(cpu_options):
    options = dataclasses.replace(cpu_options, backward=True, time_cap=0.5)
    found = evaluate_batch(RMSNORM, [CANDIDATES / f"{name}.py" for name in CHECKED], options)
    return dict(zip(CHECKED, found))


def test_cpp_kernels_with_a_correct_backward_pass(results):
    result = results["backward_cpp_rmsnorm"]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.backward and "(forward and backward)" in result.explanation
    # forward alone is timed beside forward plus backward, which the headline is of
    assert {"candidate", "reference", "candidate_forward", "reference_forward"} <= set(result.timings)
    assert result.timed_calls_checked and result.timed_calls_checked >= 5
    # each gradient's atol gained the reference's own float32 rounding, measured against float64: small here
    assert set(result.grad_allowance) == {"gradient of input 0", "gradient of parameter weight"}
    assert all(0 <= a < 1e-3 for a in result.grad_allowance.values()), result.grad_allowance
    assert "reference's own float32 rounding" in tolerance_text(result)


def test_a_wrong_parameter_gradient_is_named_with_where_and_by_how_much(results):
    result = results["backward_wrong_weight_grad"]
    assert result.verdict is Verdict.INCORRECT
    assert "gradient of parameter weight differs from the reference" in result.explanation, result.explanation
    assert "first at index" in result.explanation and "got" in result.explanation


def test_a_missing_input_gradient_is_named(results):
    result = results["backward_missing_input_grad"]
    assert result.verdict is Verdict.INCORRECT
    assert "gradient of input 0 is missing (None)" in result.explanation, result.explanation


def test_a_problem_declares_backward_and_its_gradient_tolerance(tmp_path, cpu_options):
    """BACKWARD = True needs no flag; GRAD_ATOL/GRAD_RTOL loosen the gradients' check alone: the wrong weight
    gradient (2% off) passes at 0.5, the outputs still at the default tolerance."""
    problem = tmp_path / "rmsnorm_loose.py"
    problem.write_text(RMSNORM.read_text() + "\nBACKWARD = True\nGRAD_ATOL = 0.5\nGRAD_RTOL = 0.5\n")
    options = dataclasses.replace(cpu_options, time_cap=0.3, shapes="off")
    result = evaluate(problem, CANDIDATES / "backward_wrong_weight_grad.py", options)
    assert result.backward and result.verdict is Verdict.CORRECT, result.explanation
    assert result.grad_allowance == {}  # a tolerance the problem sets is applied as it is


def test_a_reference_that_draws_random_numbers_gets_no_allowance_and_says_why(cpu_options):
    """Dropout's float64 copy would draw other numbers: its difference would not be rounding."""
    from harness.engine.evaluate import Evaluator

    with Evaluator(PROBLEMS / "dropout_train.py", dataclasses.replace(cpu_options, backward=True)) as evaluator:
        evaluator.start_reference()
        assert evaluator.reference_info.grad_allowance == {}
        assert any("held to the outputs' tolerance alone: the reference draws random numbers" in w
                   for w in evaluator.problem_warnings), evaluator.problem_warnings


def test_the_gradients_allowance_is_the_references_own_rounding():
    """A weight's gradient sums over the whole batch: in float32 it is off from float64 by more than
    an output is, and a candidate that sums in another order may be too. The allowance measures
    that; a float64 reference has none, and an output never gets it."""
    import torch

    from harness.engine.checking import compare
    from harness.engine.workers import backward

    torch.manual_seed(0)
    model = torch.nn.Linear(256, 8)
    inputs = [torch.randn(8192, 256)]
    allowance = backward.rounding_allowance(model, inputs, 7, torch.device("cpu"), first_gradient=1)
    assert len(allowance) == 3 and all(a > 0 for a in allowance), allowance  # input, weight, bias
    exact = backward.rounding_allowance(model.double(), [inputs[0].double()], 7, torch.device("cpu"), 1)
    assert exact == [0.0, 0.0, 0.0]

    ref = [torch.zeros(4), torch.zeros(4)]  # an output, then a gradient
    off = [torch.tensor([0, 3e-4, 0, 0]), torch.tensor([0, 3e-4, 0, 0])]
    tol = lambda dtype: (1e-4, 1e-4)  # noqa: E731
    labels = ["the output", "gradient of input 0"]
    gradient_off = [ref[0], off[1]]
    assert not compare.compare(ref, gradient_off, ["cpu"] * 2, tol, labels, 1).passed
    assert compare.compare(ref, gradient_off, ["cpu"] * 2, tol, labels, 1, allowance=[1e-3]).passed
    assert not compare.compare(ref, [off[0], ref[1]], ["cpu"] * 2, tol, labels, 1, allowance=[1e-3]).passed


def test_outputs_without_a_gradient_skip_the_problem(cpu_options):
    with pytest.raises(NoBackward, match="no output of Model.forward has a gradient"):
        evaluate(PROBLEMS / "argmax_rows.py", CANDIDATES / "backward_rmsnorm.py",
                 dataclasses.replace(cpu_options, backward=True))


def test_a_forward_bench_is_not_resumed_under_backward():
    forward = [SweepRecord("a", "level1", "c", 0, "correct")]
    options = dataclasses.replace(__import__("harness").EvalOptions(), backward=True)
    with pytest.raises(SuiteError, match="checked forward passes only"):
        _backward_as_recorded(options, forward)
    assert not _backward_as_recorded(dataclasses.replace(options, backward=False), forward).backward
    assert _backward_as_recorded(options, [SweepRecord("a", "level1", "c", 0, PROBLEM_ERROR)]).backward


def test_bench_records_backward_skips_gradient_free_problems_and_resume_keeps_it(tmp_path, cache_dir):
    problems, cands = tmp_path / "problems" / "level1", tmp_path / "cands" / "level1"
    problems.mkdir(parents=True)
    (problems / "1_rmsnorm.py").write_text(RMSNORM.read_text())
    (problems / "2_argmax.py").write_text((PROBLEMS / "argmax_rows.py").read_text())
    for n in (1, 2):
        (cands / str(n)).mkdir(parents=True)
        (cands / str(n) / "sample_0.py").write_text((CANDIDATES / "backward_rmsnorm.py").read_text())
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def sweep(*extra):
        done = subprocess.run([sys.executable, "-m", "harness", "sweep", str(problems.parent), str(cands.parent),
                               "--device", "cpu", "--time-cap", "0.3", "--shapes", "off", "--cache-dir",
                               str(cache_dir), *extra], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    said = sweep("--backward", "-o", str(out))
    assert "1 problem(s) skipped under --backward" in said and "2_argmax" in said, said
    records = {r.problem: r for r in read_records(out / "results.jsonl")}
    assert records["1_rmsnorm"].verdict == "correct" and records["1_rmsnorm"].backward
    assert records["2_argmax"].verdict == SKIPPED and "no output" in records["2_argmax"].explanation
    (level,) = summarize(list(records.values()))
    assert level.evaluations == 1 and level.correct == 1 and level.skipped == ["2_argmax"]

    wrong = (CANDIDATES / "backward_rmsnorm.py").read_text().replace("grad_weight = (", "grad_weight = 1.02 * (")
    (cands / "1" / "sample_1.py").write_text(wrong)
    sweep("--resume", str(out))  # no --backward: the records say it
    added = [r for r in read_records(out / "results.jsonl") if r.candidate.endswith("sample_1.py")]
    assert len(added) == 1 and added[0].backward and added[0].verdict == "incorrect", added
    assert "gradient of parameter weight" in added[0].explanation


@pytest.mark.gpu
def test_gpu_shipped_training_kernel_passes_forward_and_backward(cache_dir):
    """kernels/rmsnorm_train.py at the problem's shape and at every derived shape (its float4 path and
    its scalar path), gradients re-checked on every timed call."""
    from harness import EvalOptions

    result = evaluate(REPO / "problems" / "rmsnorm_train.py", REPO / "kernels" / "rmsnorm_train.py",
                      EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=3.0))
    assert result.backward and result.verdict is Verdict.CORRECT, result.explanation
    assert result.shapes and not result.failed_shapes, [s.reason for s in result.failed_shapes]
    assert result.timed_calls_checked and "candidate_forward" in result.timings
