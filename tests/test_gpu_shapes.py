"""On a GPU: the shipped kernels at other shapes, and the CUDA-graph check (seeds 001/002
get both in test_gpu_seeds.py).

Set HARNESS_GPU_REPORT to a path to collect each result as JSON lines (the variants
passed, whether it was capturable) for the issue's closing note."""
import pytest

from conftest import CANDIDATES, PROBLEMS, REPO
from harness import EvalOptions, Evaluator, Verdict, evaluate
from test_gpu_seeds import record

KERNELS = sorted((REPO / "kernels").glob("*.py"))


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda p: p.stem)
def test_shipped_kernel_shapes_and_graph(kernel, cache_dir):
    result = evaluate(REPO / "problems" / kernel.name, kernel, EvalOptions(device="cuda", cache_dir=cache_dir))
    record(f"kernel {kernel.stem}", result)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert all(s.passed is not None or s.reason for s in result.shapes)


@pytest.mark.gpu
def test_graph_check_notes_what_cannot_be_captured(cache_dir):
    options = EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=1.0)
    with Evaluator(PROBLEMS / "small_layernorm.py", options) as evaluator:
        syncs = evaluator.evaluate(CANDIDATES / "syncs_in_forward.py")
        plain = evaluator.evaluate(CANDIDATES / "py_correct.py")
    assert syncs.verdict is Verdict.CORRECT, syncs.explanation  # a note, not a rejection
    assert syncs.not_capturable and "captur" in syncs.not_capturable.lower()
    assert plain.verdict is Verdict.CORRECT and plain.not_capturable is None
