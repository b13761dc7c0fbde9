"""Lean torch headers (engine/building/lean.py): a candidate's umbrella includes replaced by the
per-operator headers its code uses, as a pure rewrite of source text; what it will not rewrite, and why."""
from harness.engine.building.lean import (BINDING, CORE, OPERATORS, REPLACED, code_only, declarations_of,
                                          lean_arguments, lean_source, prelude)

# The headers a prelude may hold as their declarations, each as it would hold it
OPS = {header: f"namespace at {{ /* {header}'s declarations */ }}\n" for header in
       (OPERATORS, *(f"ATen/ops/{name}.h" for name in ("empty", "empty_like", "zeros", "matmul", "max", "relu")))}

KERNEL = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

// torch::nn::Linear named in a comment, and "at::native::foo" in a string: neither is code
template <typename scalar_t>
__global__ void relu_kernel(const scalar_t* x, scalar_t* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > scalar_t(0) ? x[i] : scalar_t(0);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be CUDA: at::native::foo");
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty_like(x);
    auto sums = torch::zeros({x.size(0)}, x.options().dtype(torch::kFloat32));
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "relu_cuda", ([&] {
        relu_kernel<scalar_t><<<1, 256, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel());
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""


def test_umbrellas_become_the_headers_the_code_uses_and_every_line_keeps_its_number():
    lean = lean_source(KERNEL, OPS, implicit=True)
    assert lean.reason == ""
    assert lean.headers == (CORE, "ATen/ops/empty_like.h", OPERATORS, "ATen/DeviceGuard.h", "ATen/Dispatch.h",
                            "ATen/ops/zeros.h", "c10/cuda/CUDAException.h", "c10/cuda/CUDAGuard.h",
                            "c10/cuda/CUDAStream.h")
    head = prelude(lean.headers, code_only(KERNEL), OPS) + "#include <cuda.h>\n#include <cuda_runtime.h>\n"
    assert lean.text.startswith(head)
    # per-operator headers and the operators held as their declarations, the operators after them
    assert head.index(OPS["ATen/ops/empty_like.h"]) < head.index(OPS[OPERATORS])
    assert OPS["ATen/ops/zeros.h"] in head and "#include <ATen/ops/" not in head
    body = lean.text[len(head):].split("\n")
    original = KERNEL.split("\n")
    assert len(body) == len(original)
    changed = {i: (a, b) for i, (a, b) in enumerate(zip(original, body)) if a != b}
    assert changed == {1: ("#include <torch/extension.h>", REPLACED.format("<torch/extension.h>")),
                       3: ("#include <ATen/cuda/CUDAContext.h>", REPLACED.format("<ATen/cuda/CUDAContext.h>"))}
    assert "torch/extension.h" not in head and "torch/types.h" not in head


def test_a_per_operator_header_stands_as_its_own_declarations():
    header = ("#pragma once\n#include <ATen/Context.h>\n#include <ATen/DeviceGuard.h>\n#include <optional>\n\n"
              "#include <ATen/ops/zeros_ops.h>\n\nnamespace at {\ninline at::Tensor zeros(at::IntArrayRef size);\n}\n")
    assert declarations_of(header) == ("\n#include <ATen/ops/zeros_ops.h>\n\nnamespace at {\n"
                                       "inline at::Tensor zeros(at::IntArrayRef size);\n}\n")


def test_beside_a_torch_header_that_includes_an_operators_header_the_headers_are_included():
    source = "#include <torch/extension.h>\n#include <ATen/native/Resize.h>\ntorch::Tensor f(torch::Tensor x) " \
             "{ return torch::zeros({2}, x.options()); }\n"
    text = lean_source(source, OPS).text
    assert "#include <ATen/ops/zeros.h>" in text and f"#include <{OPERATORS}>" in text
    assert OPS["ATen/ops/zeros.h"] not in text  # held as declarations, they would stand twice


def test_torch_spellings_stay_and_only_the_dtype_names_used_are_defined():
    text = lean_source(KERNEL, OPS, implicit=True).text
    assert "namespace torch {\nusing namespace at;" in text
    assert "constexpr auto kFloat32 = at::kFloat;" in text
    assert "kFloat64" not in text and "kI32" not in text  # unused: nvcc would warn of them


def test_names_no_header_declares_keep_the_source_as_written():
    cases = {
        "auto w = torch::zeros({4}, torch::TensorOptions().requires_grad(true));": "requires_grad",
        "auto t = torch::tensor({1.0, 2.0});": "torch::tensor",
        "torch::nn::Linear fc(4, 4);": "torch::nn::Linear",
        "auto y = at::native::relu(x);": "at::native::relu",
        "auto y = torch::frobnicate(x);": "torch::frobnicate",
        "torch::cuda::synchronize();": "torch::cuda::synchronize",
        "TORCH_LIBRARY(my_ops, m) { m.def(\"f\", f); }": "TORCH_LIBRARY",
    }
    for line, named in cases.items():
        source = f"#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) {{\n    {line}\n    return x;\n}}\n"
        lean = lean_source(source, OPS)
        assert named in lean.reason, (line, lean.reason)
        assert lean.text == source and lean.headers == ()


def test_what_comments_and_strings_say_is_not_code():
    commented = "// #include <torch/extension.h>\n/* torch::nn::Linear */\n__global__ void k() {}\n"
    assert lean_source(commented, OPS).reason == "it includes no umbrella torch header"
    assert code_only('x = 1\'000\'000; s = "a\\"b"; c = \'"\';') == 'x = 1\'000\'000; s =       ; c =    ;'


def test_raw_cuda_gets_no_torch_header_at_all():
    raw = "__global__ void add(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = max(x[i], 0.f); }\n"
    lean = lean_source(raw, OPS, implicit=True)  # load_inline would have put torch/types.h before it
    assert lean.reason == "" and lean.headers == ()
    assert "ATen" not in lean.text and "namespace torch" not in lean.text


def test_other_cuda_helpers_and_unqualified_calls():
    source = ("#include <torch/extension.h>\nusing namespace at;\n"
              "Tensor f(Tensor a, Tensor b) { auto p = at::cuda::getCurrentDeviceProperties();\n"
              "  at::NoGradGuard no_grad; std::cout << a; return matmul(a, b); }\n")
    headers = lean_source(source, OPS).headers
    assert {"ATen/cuda/CUDAContext.h", "ATen/core/grad_mode.h", "ATen/core/Formatting.h",
            "ATen/ops/matmul.h"} <= set(headers)


def test_load_inline_arguments_get_lean_sources_in_load_inlines_own_layout():
    cpp = ["torch::Tensor relu_cuda(torch::Tensor x);"]
    arguments = {"name": "relu", "cpp_sources": cpp, "cuda_sources": KERNEL, "functions": ["relu_cuda"],
                 "use_pch": True, "no_implicit_headers": False}
    lean = lean_arguments(arguments, OPS)
    assert lean.reason == ""
    passed = lean.arguments
    assert passed["no_implicit_headers"] is True and passed["use_pch"] is False
    [main] = passed["cpp_sources"]
    assert f"#include <{BINDING}>\n#include <{CORE}>\n" in main and main.endswith(cpp[0])
    [cu] = passed["cuda_sources"]
    assert cu == lean_source(KERNEL, OPS, implicit=True).text
    assert BINDING in lean.headers and "ATen/ops/empty_like.h" in lean.headers
    assert arguments["cpp_sources"] is cpp and cpp == ["torch::Tensor relu_cuda(torch::Tensor x);"]  # untouched


def test_a_source_that_cannot_be_lean_keeps_the_whole_build_as_written():
    blocked = KERNEL.replace("return y;", "auto w = torch::nn::functional::relu(y);\n    return w;")
    lean = lean_arguments({"name": "r", "cpp_sources": "int f();", "cuda_sources": [blocked]}, OPS)
    assert lean.arguments is None
    assert lean.reason == "cuda.cu: it uses torch::nn::functional::relu, which needs torch's full headers"
    both = lean_arguments({"name": "b", "cpp_sources": "torch::jit::script::Module m;", "cuda_sources": blocked}, OPS)
    assert both.arguments is None
    assert both.reason.startswith("main.cpp: it uses torch::jit::script::Module") and "cuda.cu: it uses" in both.reason


def test_bindings_written_in_the_cu_get_what_they_need():
    bound = KERNEL + "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"relu\", &relu_cuda); }\n"
    lean = lean_source(bound, OPS, implicit=True)
    assert lean.reason == "" and lean.headers[0] == BINDING


def test_told_to_add_no_headers_raw_cuda_stays_and_main_cpp_is_lean():
    quick = lean_arguments({"name": "q", "cpp_sources": ["#include <torch/extension.h>\nint f();"],
                            "cuda_sources": ["__global__ void k() {}"], "no_implicit_headers": True}, OPS)
    assert quick.arguments["cuda_sources"] == ["__global__ void k() {}"]
    assert f"#include <{BINDING}>" in quick.arguments["cpp_sources"][0]
    assert quick.reason == "cuda.cu: it includes no umbrella torch header"
    raw = lean_arguments({"name": "p", "cpp_sources": ["#include <pybind11/pybind11.h>"],
                          "cuda_sources": ["__global__ void k() {}"], "no_implicit_headers": True}, OPS)
    assert raw.arguments is None  # nothing to make lean
