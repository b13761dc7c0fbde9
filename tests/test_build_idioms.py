"""The four build idioms of bench/idioms/generate.py: well-formed candidates, and
the pybind and ctypes ones free of torch headers."""
import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import PROBLEMS, REPO

spec = importlib.util.spec_from_file_location("bench_idioms_generate", REPO / "bench" / "idioms" / "generate.py")
generate = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = generate
spec.loader.exec_module(generate)

TORCH_INCLUDE = re.compile(r"#include\s*[<\"](torch|ATen|c10|caffe2)/")
TORCH_HEADER_PATH = re.compile(r"/include/(torch|ATen|c10|caffe2)/")


def parsed(idiom: str) -> ast.Module:
    return ast.parse(generate.candidate_source(idiom))


def constant(tree: ast.Module, name: str) -> str:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no module-level {name}")


def load_inline_keywords(tree: ast.Module) -> dict:
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "load_inline"]
    assert len(calls) == 1
    return {k.arg: k.value for k in calls[0].keywords}


@pytest.mark.parametrize("idiom", generate.IDIOMS)
def test_each_idiom_is_a_candidate_file(idiom):
    tree = parsed(idiom)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert "ModelNew" in classes
    methods = {n.name for n in classes["ModelNew"].body if isinstance(n, ast.FunctionDef)}
    assert {"__init__", "forward"} <= methods
    # every idiom compiles the one shared kernel text
    assert generate.KERNELS in constant(tree, "CUDA_SOURCE")
    compile(generate.candidate_source(idiom), f"{idiom}.py", "exec")


@pytest.mark.parametrize("idiom", ["pybind", "ctypes"])
def test_pybind_and_ctypes_include_no_torch_header(idiom):
    tree = parsed(idiom)
    for name in ("CPP_SOURCE", "CUDA_SOURCE"):
        assert not TORCH_INCLUDE.search(constant(tree, name)), name
    keywords = load_inline_keywords(tree)
    # without it load_inline adds torch/extension.h and torch/types.h itself
    assert ast.literal_eval(keywords["no_implicit_headers"]) is True
    # functions= would make load_inline write bindings through torch::wrap_pybind_function
    assert "functions" not in keywords


def test_ctypes_builds_a_plain_library():
    assert ast.literal_eval(load_inline_keywords(parsed("ctypes"))["is_python_module"]) is False


def test_quick_keeps_torch_out_of_the_cu_and_uses_the_precompiled_header():
    tree = parsed("quick")
    assert not TORCH_INCLUDE.search(constant(tree, "CUDA_SOURCE"))
    first_include = re.search(r"#include\s*<([^>]+)>", constant(tree, "CPP_SOURCE"))[1]
    assert first_include == "torch/extension.h"  # gcc uses the precompiled header only for the first include
    keywords = load_inline_keywords(tree)
    assert ast.literal_eval(keywords["no_implicit_headers"]) is True
    assert ast.literal_eval(keywords["use_pch"]) is True


def test_seed_puts_torch_in_the_cu_and_only_a_prototype_in_cpp_sources():
    tree = parsed("seed")
    assert "#include <torch/extension.h>" in constant(tree, "CUDA_SOURCE")
    assert "#include" not in constant(tree, "CPP_SOURCE")


def test_variants_are_different_sources(tmp_path):
    paths = generate.write_quick_variants(tmp_path, [64, 96, 128])
    assert len({p.read_text() for p in paths}) == 3
    with pytest.raises(ValueError, match="multiple of 32"):
        generate.candidate_source("quick", 100)


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_raw_sources_preprocess_without_torch_headers(tmp_path):
    from torch.utils.cpp_extension import include_paths

    cu = tmp_path / "kernels.cu"
    cu.write_text(generate.cuda_source())
    # no torch include path at all: the .cu cannot reach a torch header
    subprocess.run(["nvcc", "-M", "-std=c++17", str(cu)], check=True, capture_output=True)
    cpp = tmp_path / "main.cpp"
    cpp.write_text(constant(parsed("pybind"), "CPP_SOURCE"))
    # with torch's include dir present (pybind11 lives in it), as load_inline passes it;
    # nvcc adds the CUDA include dir and hands a .cpp to the host compiler
    includes = [include_paths()[0], sysconfig.get_path("include")]
    out = subprocess.run(["nvcc", "-M", "-std=c++17", "-DTORCH_EXTENSION_NAME=probe",
                          *[arg for i in includes for arg in ("-isystem", i)], str(cpp)], check=True, capture_output=True, text=True)
    assert "pybind11.h" in out.stdout and "cuda_runtime_api.h" in out.stdout
    assert not [h for h in out.stdout.split() if TORCH_HEADER_PATH.search(h)]


@pytest.mark.gpu
@pytest.mark.parametrize("idiom", ["quick", "pybind", "ctypes"])
def test_idioms_are_correct_on_a_gpu(idiom, tmp_path, cache_dir):
    from harness.engine.evaluate import EvalOptions, evaluate
    from harness.results import Verdict

    path = tmp_path / f"{idiom}.py"
    path.write_text(generate.candidate_source(idiom))
    result = evaluate(PROBLEMS / "small_layernorm.py", path,
                      EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=1.0, min_samples=5))
    assert result.verdict is Verdict.CORRECT, result.explanation
