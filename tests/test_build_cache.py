"""An extension is built once per thing built: the build cache keys each load_inline call on the
values it is passed (sources, name, functions, flags) and the toolchain, not on the candidate's file,
so a candidate that changes only its Python starts no compiler, two candidates that pass the same
sources share one build (one compiles, the other waits and finds it built), and a change to a source
string rebuilds. A compile error names the candidate file's own line where a string literal holds it."""
import dataclasses
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import CANDIDATES, PROBLEMS
from harness import Evaluator, Verdict
from harness.engine.building.builder import Builder
from harness.engine.building.cache import BuildEntry, first_errors
from harness.engine.building.extensions import extension_dir, extension_key, normalized
from harness.engine.building.places import Place, candidate_place, literals, on_candidate_lines
from harness.problem import load_problem
from harness.results import Headers

SMALL = PROBLEMS / "small_layernorm.py"
FORWARD = "        return ext.layer_norm(x, self.weight, self.bias, 1e-5)\n"


def variants(tmp_path) -> dict:
    """The C++ LayerNorm and its variants: forward's Python changed; the same C++ put together from
    two literals at import; one C++ line changed."""
    base = (CANDIDATES / "cpp_layernorm.py").read_text()
    assert FORWARD in base and "        double sum = 0, sq = 0;\n" in base
    texts = {
        "base": base,
        "python": base.replace(FORWARD, "        # only Python changed\n        y = ext.layer_norm(x, self.weight, "
                                        "self.bias, 1e-5)\n        return y\n"),
        "joined": base.replace("#include <cmath>\n", '#include <cmath>\n""" + r"""'),
        "cpp": base.replace("double sum = 0, sq = 0;", "double sum = 0.0, sq = 0.0;"),
    }
    paths = {}
    for label, text in texts.items():
        paths[label] = tmp_path / f"{label}.py"
        paths[label].write_text(text)
    return paths


def products(directory) -> dict:
    """What the compiler and linker wrote, with their mtimes, and ninja's log of the commands it ran."""
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir()
            if p.suffix in (".o", ".so") or p.name == ".ninja_log"}


def test_python_only_changes_reuse_the_build_and_a_cpp_change_rebuilds(tmp_path, cpu_options):
    cpu_options = dataclasses.replace(cpu_options, cache_dir=tmp_path / "cache")  # fresh: the first build compiles
    paths = variants(tmp_path)
    builder = Builder(load_problem(SMALL), cpu_options)
    # two files with the same sources at once: one compiles, the other waits on the extension's lock
    with ThreadPoolExecutor(2) as pool:
        base, joined = pool.map(builder.build, [paths["base"], paths["joined"]])
    assert not base.failed and not joined.failed, (base.result.explanation, joined.result.explanation)
    assert base.entry.key != joined.entry.key  # two files, two entries ...
    assert base.result.build.extensions == joined.result.build.extensions  # ... one extension
    assert sorted([base.result.build.cached, joined.result.build.cached]) == [False, True]
    assert base.result.build.headers is joined.result.build.headers is Headers.LEAN  # main.cpp made lean
    [key] = base.result.build.extensions
    directory = extension_dir(base.entry.extensions, key)
    built = products(directory)
    assert any(name.endswith(".so") for name in built)

    with Evaluator(SMALL, cpu_options) as evaluator:
        first = evaluator.evaluate(paths["base"])
        assert first.verdict is Verdict.CORRECT, first.explanation
        python = evaluator.evaluate(paths["python"])
        assert python.verdict is Verdict.CORRECT, python.explanation
        assert python.build.key != first.build.key and python.build.extensions == [key]
        assert python.build.cached  # its build child found the extension built ...
        assert products(directory) == built  # ... and no compiler or linker ran, nor the worker's import built

        cpp = evaluator.evaluate(paths["cpp"])
        assert cpp.verdict is Verdict.CORRECT, cpp.explanation
        assert not cpp.build.cached and cpp.build.seconds > 0
        assert cpp.build.extensions and cpp.build.extensions != [key]
        assert products(directory) == built


def test_a_compile_error_names_the_candidate_files_line(cpu_options):
    """cpp_compile_error.py lacks a semicolon at its line 23; g++ stops at the next statement, its
    line 24 (main.cpp's line 20: load_inline puts one include before the source string, whose first
    line is the empty one after the opening quotes, on line 6)."""
    source = (CANDIDATES / "cpp_compile_error.py").read_text()
    assert "double inv" in source.splitlines()[23]
    with Evaluator(SMALL, cpu_options) as evaluator:
        result = evaluator.evaluate(CANDIDATES / "cpp_compile_error.py")
    assert result.verdict is Verdict.COMPILE_ERROR
    errors = result.build.first_errors
    assert errors[0] == ("cpp_compile_error.py line 24, column 9 (main.cpp:20:9): error: expected ‘,’ or ‘;’ "
                         "before ‘double’")
    assert errors[1].startswith("   24 |         double inv")  # the quoted line, numbered as in the file
    assert "cpp_compile_error.py line 24, column 9 (main.cpp:20:9)" in result.explanation


CANDIDATE = '''import torch
from torch.utils.cpp_extension import load_inline

HEADER = "#include <vector>\\n"
cuda_source = r"""
__global__ void add_one(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y;
}
"""
cpp_source = """
torch::Tensor add_one(torch::Tensor x);
"""
lines = ["int twice(int v) {", "    return v * 3 + undefined;", "}"]
ext = load_inline(name="k", cpp_sources=[HEADER + cpp_source, "\\n".join(lines)], cuda_sources=cuda_source,
                  functions=["add_one"])
'''


def generated(sources: list[str], prepended: list[str], appended: list[str] = ()) -> str:
    """A file as load_inline writes it: what it puts first, the sources, what it adds after, one per line."""
    return "\n".join([*prepended, *sources, *appended])


def test_places_in_load_inlines_files_map_back_to_the_candidates_literals():
    found = literals(CANDIDATE)
    cuda = CANDIDATE.split('cuda_source = r"""')[1].split('"""')[0]
    cpp = CANDIDATE.split('cpp_source = """')[1].split('"""')[0]
    main = generated(["#include <vector>\n" + cpp, "int twice(int v) {\n    return v * 3 + undefined;\n}"],
                     ["#include <torch/extension.h>"], ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {", "}"])
    cu = generated([cuda], ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"])
    # cuda.cu: three includes, then the literal from its empty first line (file line 5): `x[i] += y` is its line 7
    assert candidate_place(cu, 7, None, found) == Place(8, None)
    assert candidate_place(cu, 7, 24, found) == Place(8, 24)
    # main.cpp: the include, HEADER (a one-line string), then the literal from its empty first line (file line 11)
    assert candidate_place(main, 4, 15, found) == Place(12, 15)
    # a line of a string joined at run time, and the bindings load_inline adds, stand in no literal
    assert candidate_place(main, 7, 20, found) is None and candidate_place(main, 9, 1, found) is None

    log = "\n".join(["/c/extensions/k/cuda.cu(7): error: identifier \"y\" is undefined",
                     "      if (i < n) x[i] += y;", "",
                     "/c/extensions/k/main.cpp:7:20: error: 'undefined' was not declared in this scope",
                     "    7 |     return v * 3 + undefined;", "      |                    ^~~~~~~~~"])
    files = {"/c/extensions/k/cuda.cu": cu, "/c/extensions/k/main.cpp": main}
    said = on_candidate_lines(log, "add.py", CANDIDATE, files)
    assert first_errors(said) == [
        'add.py line 8 (cuda.cu:7): error: identifier "y" is undefined', "      if (i < n) x[i] += y;",
        "main.cpp:7:20 (of the sources as passed at run time: no string literal of add.py holds this line): "
        "error: 'undefined' was not declared in this scope",
        "    7 |     return v * 3 + undefined;", "      |                    ^~~~~~~~~"]


def test_the_quoted_line_carries_the_candidates_number():
    source = "\n" * 95 + 'src = """\nint a;\nint b = c;\n"""\n'
    main = generated(["\nint a;\nint b = c;\n"], ["#include <torch/extension.h>"])
    log = "/x/main.cpp:4:9: error: 'c' was not declared\n    4 | int b = c;\n      |         ^\n    4 | int b = c;"
    assert on_candidate_lines(log, "k.py", source, {"/x/main.cpp": main}).splitlines() == [
        "k.py line 98, column 9 (main.cpp:4:9): error: 'c' was not declared", "   98 | int b = c;",
        "      |         ^", "    4 | int b = c;"]  # only the line right below the diagnostic is its quote


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_real_nvcc_error_names_the_candidates_line(tmp_path):
    """nvcc compiles device code without a GPU: its own diagnostic, on a cuda.cu laid out as load_inline
    lays it out with no_implicit_headers=True (the sources alone)."""
    source = CANDIDATE.replace('cuda_source = r"""\n', 'cuda_source = r"""\n#include <cuda_runtime.h>\n')
    cuda = source.split('cuda_source = r"""')[1].split('"""')[0]
    cu = tmp_path / "extensions" / "k" / "cuda.cu"
    cu.parent.mkdir(parents=True)
    cu.write_text(cuda)
    said = subprocess.run(["nvcc", "-c", str(cu), "-o", str(cu.with_suffix(".o"))], capture_output=True, text=True)
    assert said.returncode != 0 and f"{cu}(5): error" in said.stdout + said.stderr
    log = on_candidate_lines(said.stdout + said.stderr, "add.py", source, {str(cu): cuda})
    assert 'add.py line 9 (cuda.cu:5): error: identifier "y" is undefined' in first_errors(log)


def test_the_key_is_of_the_values_passed_and_each_that_builds_something_changes_it():
    passed = {"name": "k", "cpp_sources": "int f();", "cuda_sources": None, "functions": ["f"], "extra_cflags": None,
              "extra_ldflags": None, "verbose": False, "build_directory": None, "use_pch": False}
    tools = {"torch": "2.13.0", "cxx": "/usr/bin/g++-12"}
    key = extension_key(passed, tools)
    # what builds nothing other, and a string passed alone or as a list of one
    same = {**passed, "cpp_sources": ["int f();"], "functions": {"f": "f"}, "extra_cflags": [], "verbose": True,
            "build_directory": "/elsewhere"}
    assert extension_key(same, tools) == key
    assert normalized(same)["cuda_sources"] == []
    for changed in ({"cpp_sources": "int f(); "}, {"name": "k2"}, {"functions": ["f", "g"]}, {"extra_cflags": ["-O3"]},
                    {"extra_ldflags": ["-lm"]}, {"cuda_sources": "__global__ void g() {}"}, {"use_pch": True}):
        assert extension_key({**passed, **changed}, tools) != key, changed
    assert extension_key(passed, {**tools, "cxx": "/usr/bin/g++-13"}) != key
    assert extension_key(passed, tools, version=1) != key  # torch's name_v1 for a name called again

