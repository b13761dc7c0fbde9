"""The static report: what a candidate's source calls, read without running it."""
import pytest

from conftest import CANDIDATES, HERE, PROBLEMS, REPO
from harness import from_json, to_json
from harness.integrity.static import STRICT_CODES, StaticReport, analyse, reference_families, static_verdict, warnings

ADVERSARIAL = HERE / "adversarial"
SMALL = (PROBLEMS / "small_layernorm.py").read_text()
PROBLEM_SOURCES = {"layernorm": SMALL, "gemm": (REPO / "problems" / "gemm_bias_relu.py").read_text(),
                   "softmax": (REPO / "problems" / "softmax_long_rows.py").read_text()}


def report_on(path, problem: str = SMALL) -> StaticReport:
    return analyse(path.read_text(), problem)


# What each adversarial file must be caught doing (other findings may come with it).
EXPECTED = {
    "alters_trial_inputs": {"monkeypatch"},
    "assumes_default_params": {"no_kernel"},
    "backward_caches_grads": {"no_kernel"},
    "backward_mutates_grad_output": {"no_kernel"},
    "background_pool": {"background_work"},
    "background_thread": {"background_work"},
    "below_floor": {"no_kernel", "state_across_calls"},
    "cache_by_content": {"state_across_calls"},
    "cache_by_data_ptr": {"state_across_calls"},
    "cache_by_id": {"state_across_calls"},
    "calls_reference_op": {"reference_op"},
    "changes_outputs_after_return": {"harness_access"},
    "compiles_reference": {"torch_compile", "reference_op"},
    "constant_output": {"no_kernel"},
    "counts_calls": {"state_across_calls"},
    "forged_channel_reply": {"harness_access", "process_exit"},
    "forged_stdout_exit": {"process_exit"},
    "forged_zero_time": {"harness_access", "process_exit"},
    "gc_finds_reference_output": {"harness_access"},
    "graph_replay": {"cuda_graph"},
    "inflates_reference_inputs": {"monkeypatch", "harness_access"},
    "l2_persistence": {"persisting_l2"},
    "lazy_tensor_subclass": {"tensor_subclass"},
    "lower_precision": {"lower_precision"},
    "lower_precision_output": {"lower_precision"},
    "enables_tf32": {"lower_precision"},
    "enables_tf32_legacy": {"lower_precision"},
    "mutates_input_for_reference": {"no_kernel"},
    "non_tensor_output": {"no_kernel"},
    "patch_allclose": {"monkeypatch"},
    "patch_channel_send": {"monkeypatch", "harness_access"},
    "patch_compare": {"monkeypatch", "harness_access"},
    "patch_cuda_event": {"monkeypatch"},
    "patch_perf_counter": {"monkeypatch"},
    "patch_synchronize": {"monkeypatch"},
    "patch_time_interleaved": {"monkeypatch", "harness_access"},
    "patch_timing_clock": {"monkeypatch", "harness_access"},
    "patch_torch_equal": {"monkeypatch"},
    "regenerates_inputs_from_seed": {"harness_access"},
    "reuses_freed_memory": {"no_kernel"},
    "seed_detects_timing": {"harness_access"},
    "side_stream": {"side_stream", "reference_op"},
    "slows_reference": {"monkeypatch"},
    "slows_reference_dispatcher": {"monkeypatch"},
    "snapshots_params_at_init": {"no_kernel"},
    "stack_detects_timing": {"harness_access"},
    "torch_function_mode": {"monkeypatch"},
    "try_except_fallback": {"fallback", "reference_op"},
    # the judge's invariants catch these at run time; the source shows what it can
    "bf16_gemm_mean": {"lower_precision"},
    "bf16_gemm_some_calls": {"lower_precision"},
    "detached_hog": {"background_work", "process_exit"},
    "escapes_subreaper": {"background_work", "process_exit"},
    "global_pre_hook": {"reference_op"},
    "half_addmm_mean": {"lower_precision"},
    "hides_tail": {"side_stream"},
    "misaligned_input": {"reference_op"},
    "replaces_random_seed": {"monkeypatch"},
    "replaces_urandom": {"monkeypatch"},
    "reuses_output": {"state_across_calls"},
    "side_stream_in_spin": {"side_stream"},
    "side_stream_unwaited": {"side_stream"},
    "swaps_input_class": {"tensor_subclass"},
    "triton_tf32_dot": set(),  # a real Triton kernel: only its numbers tell
    "unstable_softmax": {"no_kernel"},  # torch ops by hand, right at randn's scale: only other inputs tell
    "wrong_every_20th": {"reference_op"},
}


def test_every_adversarial_file_has_expectations():
    assert sorted(p.stem for p in ADVERSARIAL.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(name for name, codes in EXPECTED.items() if codes))
def test_adversarial_source_is_flagged_and_strict_rejects_it(name):
    report = report_on(ADVERSARIAL / f"{name}.py")
    assert EXPECTED[name] <= report.codes(), [f.message for f in report.findings]
    assert all(f.line >= 1 for f in report.findings)
    assert static_verdict(report, "warn") is None
    assert static_verdict(report, "strict").startswith("Under the strict policy")


def test_honest_candidates():
    # torch ops written out by hand: no reference op, but no kernel of its own either
    assert report_on(CANDIDATES / "py_correct.py").codes() == {"no_kernel"}
    # a C++ extension whose function happens to be called layer_norm
    cpp = report_on(CANDIDATES / "cpp_layernorm.py")
    assert cpp.findings == [] and static_verdict(cpp, "strict") is None
    shipped = report_on(REPO / "kernels" / "layernorm_4d.py", (REPO / "problems" / "layernorm_4d.py").read_text())
    assert shipped.findings == [], [f.message for f in shipped.findings]


def test_strict_verdict_names_each_finding_and_its_line():
    reason = static_verdict(report_on(ADVERSARIAL / "try_except_fallback.py"), "strict")
    assert "falls back to torch when its try block fails (line 42)" in reason
    assert "calls the reference op itself: torch.nn.functional.layer_norm" in reason


# A module that builds an extension, so that no other finding intrudes on the one tested.
KERNEL_MODULE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="", cuda_sources="__global__ void k() {}", functions=["op"])
'''


def with_kernel(body: str) -> str:
    return KERNEL_MODULE + "\n" + body + "\n"


def test_hints_alone_do_not_reject():
    source = with_kernel("class ModelNew(nn.Module):\n    def forward(self, x):\n        self.calls += 1\n"
                         "        return ext.op(x.half())")
    report = analyse(source, SMALL)
    assert report.codes() == {"state_across_calls", "lower_precision"}
    assert not report.codes() & STRICT_CODES and static_verdict(report, "strict") is None
    # a problem that is itself in half precision makes half precision no finding
    assert "lower_precision" not in analyse(source, SMALL + "\nDTYPE = torch.float16\n").codes()


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="strict"):
        static_verdict(StaticReport(), "lenient")


def test_report_round_trips_through_json():
    report = report_on(ADVERSARIAL / "forged_channel_reply.py")
    assert from_json(StaticReport, to_json(report)) == report
    assert warnings(report)[0].startswith("static check: ")


@pytest.mark.parametrize("problem, families", [
    ("layernorm_4d", ["layer_norm"]),
    ("gemm_bias_relu", ["gemm", "relu"]),
    ("conv_transpose3d_layernorm_gelu_scale", ["conv", "gelu", "layer_norm"]),
    ("softmax_long_rows", ["softmax"]),
    ("rmsnorm", []),  # written out in elementwise ops: no single op to call instead
])
def test_reference_families_come_from_the_problem(problem, families):
    assert reference_families((REPO / "problems" / f"{problem}.py").read_text()) == families


@pytest.mark.parametrize("body, problem, flagged", [
    ("from torch.nn.functional import layer_norm as ln\nY = ln", "layernorm", True),  # imported under another name
    ("Y = torch.ops.aten.native_layer_norm.default", "layernorm", True),
    ("Y = getattr(torch.nn.functional, 'layer_norm')", "layernorm", True),
    ("def f(x):\n    return x.softmax(-1)", "softmax", True),  # as a Tensor method
    ("def f(x):\n    return ext.softmax(x)", "softmax", False),  # the extension's own function
    ("def f(x, w):\n    return x @ w", "gemm", True),
    ("def f(x, w):\n    return x @ w", "layernorm", False),  # not the reference's op there
    ("S = 'auto y = at::layer_norm(x, shape, w, b, eps);'", "layernorm", True),  # in C++ text
    ("S = 'torch::Tensor layer_norm(torch::Tensor x) { return x; }'", "layernorm", False),  # its own C++ function
    ("S = 'cublasSgemm(handle, a, b);'", "gemm", True),
])
def test_reference_op_detection(body, problem, flagged):
    report = analyse(with_kernel(body), PROBLEM_SOURCES[problem])
    assert ("reference_op" in report.codes()) is flagged, [f.message for f in report.findings]


@pytest.mark.parametrize("body, code", [
    ("import sys\nsys.modules['harness.timing'].time_interleaved = None", "monkeypatch"),
    ("import sys\nt = sys.modules.get('harness.timing')\nsetattr(t, 'Clock', None)", "monkeypatch"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "monkeypatch"),
    ("lib = torch.library.Library('aten', 'IMPL')", "monkeypatch"),
    ("import inspect", "harness_access"),
    ("import ctypes", "harness_access"),
    ("S = open('/proc/self/maps').read()", "harness_access"),
    ("import os\nos._exit(0)", "process_exit"),
    ("from concurrent.futures import ThreadPoolExecutor", "background_work"),
    ("S = 'cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);'", "side_stream"),
    ("S = 'cudaGraphLaunch(exec, stream);'", "cuda_graph"),
    ("@torch.compile\ndef f(x):\n    return x", "torch_compile"),
    ("def f(x):\n    try:\n        return ext.op(x)\n    except RuntimeError:\n        return x.clone()",
     "fallback"),
])
def test_other_findings(body, code):
    report = analyse(with_kernel(body), SMALL)
    assert code in report.codes(), [f.message for f in report.findings]


def test_a_try_that_re_raises_is_no_fallback():
    body = ("def f(x):\n    try:\n        return ext.op(x)\n    except RuntimeError as e:\n"
            "        raise ValueError(x.shape) from e")
    assert "fallback" not in analyse(with_kernel(body), SMALL).codes()


def test_unparsable_source():
    report = analyse("def f(:\n", SMALL)
    assert report.codes() == {"syntax_error"} and report.findings[0].line == 1
    assert static_verdict(report, "strict") is None  # the import fails on its own, with the compiler's words
