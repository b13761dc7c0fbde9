"""Faults on the GPU: each ends in a verdict, and the next candidate on the
same GPU is evaluated normally afterwards."""
import dataclasses

import pytest

from conftest import CANDIDATES, PROBLEMS
from harness import EvalOptions, Evaluator, Verdict

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_small(cache_dir):
    # a small host-memory limit, so that the host out-of-memory case is safe on a shared machine
    options = EvalOptions(device="cuda", cache_dir=cache_dir, run_timeout=60, time_cap=2, max_host_memory=8 << 30)
    with Evaluator(PROBLEMS / "small_layernorm.py", options) as ev:
        yield ev


@pytest.mark.parametrize("name, verdicts, says", [
    ("gpu_illegal_address", {Verdict.RUNTIME_ERROR, Verdict.CRASHED}, "illegal memory access"),
    ("gpu_out_of_memory", {Verdict.RUNTIME_ERROR}, "out of memory"),
    ("gpu_endless_kernel", {Verdict.TIMEOUT}, "was stopped"),
    ("host_out_of_memory", {Verdict.RUNTIME_ERROR}, "host memory"),
])
def test_fault_then_a_normal_candidate(gpu_small, name, verdicts, says):
    if name == "gpu_endless_kernel":
        gpu_small.options = dataclasses.replace(gpu_small.options, run_timeout=20)
    fault = gpu_small.evaluate(CANDIDATES / f"{name}.py")
    assert fault.verdict in verdicts, fault.explanation
    assert says.lower() in fault.explanation.lower()
    after = gpu_small.evaluate(CANDIDATES / "py_correct.py")
    assert after.verdict is Verdict.CORRECT, after.explanation
    assert after.timings["candidate"].method == "cuda_events"


def test_shipped_layernorm_kernel_is_correct(cache_dir):
    from conftest import REPO

    with Evaluator(REPO / "problems" / "layernorm_4d.py", EvalOptions(device="cuda", cache_dir=cache_dir)) as ev:
        result = ev.evaluate(REPO / "kernels" / "layernorm_4d.py")
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.roofline.bandwidth_share > 0
