"""Builds with lean torch headers, for real: `harness build` of a KernelBench-style CUDA candidate on a machine
without a GPU (nvcc against torch's headers, linked against stand-ins); and a candidate whose lean build
fails, built as written once and remembered so."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import CANDIDATES, PROBLEMS, REPO
from harness import Evaluator, Verdict
from harness.engine.building.builder import Builder
from harness.engine.building.extensions import extension_dir
from harness.engine.building.headers import read_choice
from harness.engine.building.nogpu import cuda_home
from harness.problem import load_problem
from harness.results import Headers
from harness.torch_install import torch_cuda

RELU = CANDIDATES / "cuda_relu.py"


@pytest.mark.skipif(torch_cuda() is not None or cuda_home() is None, reason="needs a CPU-only torch and nvcc")
def test_harness_build_compiles_lean_and_says_so(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "build.json"
    command = [sys.executable, "-m", "harness", "build", str(PROBLEMS / "big_relu.py"), str(RELU),
               "--cache-dir", str(cache), "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    lean_seconds = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    said = json.loads(out.read_text())
    assert said["ok"] and said["headers"] == "lean" and said["compiled_only"] and said["arch"] == "9.0"
    assert 0 < said["build"]["seconds"] <= said["seconds"] <= lean_seconds
    assert "built for arch 9.0" in done.stdout and "lean torch headers" in done.stdout
    assert "not loaded: this machine's torch has no CUDA" in done.stdout
    [key] = said["build"]["extensions"]
    extension = extension_dir(cache / "extensions", key)
    choice = read_choice(extension)
    assert choice.headers is Headers.LEAN and "ATen/ops/empty_like.h" in choice.included
    assert "torch/extension.h" not in (extension / "cuda.cu").read_text().split("// (lean build")[0]

    # how much sooner than as written it compiles is bench/lean_headers.py's to measure, not a test's to assert

    again = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    cached = json.loads(out.read_text())
    assert cached["build"]["cached"] and cached["headers"] == "lean"  # the file's record: no build child at all


CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

// the C++ frontend's ExpandingArray, which the lean headers leave out: its lean build fails
torch::Tensor scaled_relu(torch::Tensor x) {
    torch::ExpandingArray<1> factor(2);
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] > 0 ? px[i] * (*factor)[0] : 0.0f;
    return out;
}
"""

ext = load_inline(name="expanding_relu", cpp_sources=cpp_source, functions=["scaled_relu"],
                  extra_cflags=["-O3"], use_pch=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scaled_relu(x) / 2
'''

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''


def test_a_lean_build_that_fails_builds_as_written_once(tmp_path, cpu_options):
    problem, candidate, copy = tmp_path / "relu.py", tmp_path / "expanding.py", tmp_path / "expanding_copy.py"
    problem.write_text(PROBLEM)
    candidate.write_text(CANDIDATE)
    copy.write_text(CANDIDATE.replace("return ext.scaled_relu(x) / 2", "y = ext.scaled_relu(x)\n        return y / 2"))
    with Evaluator(problem, cpu_options) as evaluator:
        result = evaluator.evaluate(candidate)
    assert result.verdict is Verdict.CORRECT, result.explanation  # built as written, the same behaviour
    assert result.build.headers is Headers.FULL
    [key] = result.build.extensions
    extension = extension_dir(cpu_options.cache_dir / "extensions", key)
    choice = read_choice(extension)
    assert choice.headers is Headers.FULL and choice.reason == "its lean build failed"
    assert any("ExpandingArray" in line for line in choice.lean_errors), choice.lean_errors
    assert not any("ExpandingArray" in line for line in result.build.first_errors)
    built = {p.name: p.stat().st_mtime_ns for p in extension.iterdir() if p.suffix in (".o", ".so")}
    # built as written under the name a fresh process gives it, so the worker's import found it built
    assert [name for name in built if name.endswith(".so")] == ["expanding_relu.so"]

    # another file with the same sources goes straight to the build as written: nothing compiles
    again = Builder(load_problem(problem), cpu_options).build(copy)
    assert not again.failed, again.result.explanation
    assert again.result.build.cached and again.result.build.headers is Headers.FULL
    assert {p.name: p.stat().st_mtime_ns for p in extension.iterdir() if p.suffix in (".o", ".so")} == built


def test_harness_build_prints_the_compilers_first_errors_on_the_candidates_lines(tmp_path, cache_dir):
    out = tmp_path / "build.json"
    done = subprocess.run([sys.executable, "-m", "harness", "build", str(PROBLEMS / "small_layernorm.py"),
                           str(CANDIDATES / "cpp_compile_error.py"), "--cache-dir", str(cache_dir), "--json", str(out)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cpp_compile_error.py did not build (compile_error;" in done.stdout
    assert "cpp_compile_error.py line 24, column 9 (main.cpp:20:9): error: expected" in done.stdout
    said = json.loads(out.read_text())
    assert not said["ok"] and said["verdict"] == "compile_error" and said["headers"] == "full"
    assert said["arch"] == "cpu" and not said["compiled_only"]
