"""perf's samples of a candidate's calls on a CPU: `perf script` output recorded from the profile worker
(tests/profiles/) read into functions and groups, and their text; real profiles under perf of a real
C++ build; source lines of a library built with -g; perf refused and perf absent."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import pytest

from harness.agent.judge import Judge
from harness.engine.options import EvalOptions
from harness.engine.profiling import perf
from harness.engine.profiling.profile import Profiler, ProfileRequest
from harness.engine.profiling.source_lines import file_offsets, parse_where, source_lines
from harness.loop.profile_text import profile_lines, sampling_lines, symbol_text
from harness.profiles import Group, Profile, SampledLine, Sampling
from harness.results import from_json, to_json
from harness.runs.settings import Evaluation

HERE = Path(__file__).parent
REPO = HERE.parent
SMALL = HERE / "problems" / "small_layernorm.py"
CPP = HERE / "candidates" / "cpp_layernorm.py"
PY = HERE / "candidates" / "py_correct.py"
RECORDED = HERE / "profiles" / "perf_script_cpp_layernorm.txt"


def recorded() -> tuple[list[perf.Sample], list[perf.Mapping], set[str]]:
    samples, mappings = perf.parse_script(RECORDED.read_text())
    return samples, mappings, {s.dso for s in samples if s.dso.endswith("/cpp_layernorm_test.so")}


def test_perf_script_is_read_into_functions_grouped_by_whose_code_they_are():
    samples, mappings, extension = recorded()
    assert len(samples) == 600 and len(extension) == 1
    sampling = perf.summarize(samples, extension, Sampling(calls=7, seconds=1.0, threads=1))
    top = sampling.functions[0]
    assert (top.symbol, top.library, top.group) == ("layer_norm", "cpp_layernorm_test.so", Group.EXTENSION)
    groups = {g.group: g for g in sampling.groups}
    assert groups[Group.EXTENSION].samples == sum(s.dso in extension for s in samples) == 364
    assert sum(g.samples for g in sampling.groups) == sampling.samples == 600
    assert [g.samples for g in sampling.groups] == sorted((g.samples for g in sampling.groups), reverse=True)
    assert {"libc10.so", "libtorch_python.so"} <= set(groups[Group.TORCH].libraries)
    assert groups[Group.PYTHON].libraries == ["libpython3.11.so.1.0"] and "libc.so.6" in groups[Group.OTHER].libraries
    # a C++ lambda's name holds spaces and parentheses: the shared object is the last parenthesised field
    assert any(s.symbol.endswith("#3}::_FUN") and s.dso in extension for s in samples)
    # every sample of the extension falls in one of its executable mappings, so each has a file offset
    assert sum(file_offsets(samples, mappings, next(iter(extension))).values()) == 364
    profile = Profile("torch-cpu", sampling=sampling)
    assert from_json(Profile, to_json(profile)) == profile


def test_the_text_gives_each_groups_share_the_top_functions_and_why_there_are_no_lines():
    samples, _, extension = recorded()
    sampling = perf.summarize(samples, extension, Sampling(calls=7, seconds=1.0, threads=1))
    lines = sampling_lines(sampling)
    assert lines[0].startswith("Sampled by perf over 7 calls (1.00 s, 1 thread, 600 samples at 1999 Hz): 61% in "
                               "the candidate's extension (cpp_layernorm_test.so), ")
    assert "| layer_norm | cpp_layernorm_test.so | 59% |" in lines
    assert lines[-1] == "No source lines: the extension was built without debug information (-g)."
    sampling.lines = [SampledLine("main.cpp", 18, 150, "for (int64_t i = 0; i < n; ++i) { sum += row[i]; }")]
    assert "| main.cpp:18 | 25% | `for (int64_t i = 0; i < n; ++i) { sum += row[i]; }` |" in sampling_lines(sampling)
    note = Sampling(note=perf.NOT_INSTALLED)
    assert sampling_lines(note) == [perf.NOT_INSTALLED]
    assert profile_lines(Profile("torch-cpu", sampling=note))[-1] == perf.NOT_INSTALLED
    name = ("pybind11::cpp_function::initialize<torch::detail::wrap_pybind_function_impl_<at::Tensor (&)(at::Tensor)"
            ", 0ul, false>, at::Tensor>::{lambda(pybind11::detail::function_call&)#3}::_FUN")
    assert symbol_text(name) == "pybind11::cpp_function::initialize<...>::{lambda(pybind11::detail::..."
    assert symbol_text("rows<float, 8>") == "rows<float, 8>"


def test_extensions_are_the_shared_objects_built_beside_a_ninja_file(tmp_path):
    built, other = tmp_path / "ext" / "x.so", tmp_path / "lib" / "y.so"
    for so in (built, other):
        so.parent.mkdir()
        so.write_bytes(b"")
    (built.parent / "build.ninja").write_text("")
    assert perf.extension_objects({str(built), str(other), "[vdso]"}) == {str(built)}
    assert perf.group_of("[kernel.kallsyms]", set()) is Group.KERNEL
    assert perf.group_of("/usr/bin/python3.11", set()) is Group.PYTHON


def test_addr2line_answers_are_read_as_file_and_line():
    assert parse_where("/tmp/ext/main.cpp:18 (discriminator 3)") == ("/tmp/ext/main.cpp", 18)
    assert parse_where("/usr/include/c++/12/bits/atomic_base.h:628") == ("/usr/include/c++/12/bits/atomic_base.h", 628)
    assert parse_where("??:0") is None and parse_where("main.cpp:?") is None and parse_where("??:?") is None


def _perf_refusal() -> str:
    """Why perf cannot sample a process here, or "" where it can."""
    found = shutil.which("perf")
    if not found:
        return "perf is not installed"
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run([found, "record", "-q", "-o", os.path.join(scratch, "d"), "--", "true"],
                              capture_output=True, text=True, timeout=60)
    return "" if done.returncode == 0 else f"perf cannot record here: {done.stderr.strip()[-300:]}"


REFUSAL = _perf_refusal()
needs_perf = pytest.mark.skipif(bool(REFUSAL), reason=REFUSAL)


@needs_perf
def test_profiling_a_cpp_candidate_samples_its_own_function(cache_dir, tmp_path):
    """The torch profiler sees only the extension's allocations; perf's samples name the C++ function
    the loop is in, among the top rows, in the candidate's extension: the profile tool's answer, the
    candidate built through the build cache."""
    options = EvalOptions(device="cpu", cache_dir=cache_dir)
    with closing(Judge(options, Evaluation(), [REPO], tmp_path / "runs")) as judge:
        profiled = judge.profile(str(SMALL), path=str(CPP))
    assert profiled.profile.kernels  # the torch profiler's rows stay
    sampling = profiled.profile.sampling
    assert sampling.note == "" and sampling.samples > 0 and sampling.calls > 0 and sampling.threads == 1
    top = [(f.symbol, f.library, f.group) for f in sampling.functions[:5]]
    assert ("layer_norm", "cpp_layernorm_test.so", Group.EXTENSION) in top, top
    assert any(g.group is Group.EXTENSION for g in sampling.groups)
    assert "in the candidate's extension (cpp_layernorm_test.so)" in profiled.text
    assert "| layer_norm | cpp_layernorm_test.so |" in profiled.text


@needs_perf
def test_harness_profile_shows_the_samples_of_the_references_calls(tmp_path):
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "-m", "harness", "profile", str(SMALL), "--reference", "--device", "cpu",
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr + done.stdout
    sampling = from_json(Profile, out.read_text()).sampling
    torch_share = next(g for g in sampling.groups if g.group is Group.TORCH)
    assert torch_share.samples > 0 and "libtorch_cpu.so" in torch_share.libraries
    said = " ".join(done.stdout.split())
    assert "Sampled by perf over" in said and "% in libtorch" in said and "libtorch_cpu.so" in said


HOT_C = """double hot(long n) {
    double s = 0;
    for (long i = 0; i < n; ++i) s += (double)i * 0.5;  /* the loop, all on line 3 */
    return s;
}
"""
MAIN_C = """#include <stdio.h>
double hot(long n);
int main(void) {
    double t = 0;
    for (int k = 0; k < 100; ++k) t += hot(2000000);
    printf("%f\\n", t);
    return 0;
}
"""


@needs_perf
@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler (cc)")
def test_samples_in_a_library_built_with_debug_info_fall_on_its_source_lines(tmp_path):
    (tmp_path / "hot.c").write_text(HOT_C)
    (tmp_path / "main.c").write_text(MAIN_C)
    library = tmp_path / "libhot.so"
    subprocess.run(["cc", "-g", "-O1", "-shared", "-fPIC", "hot.c", "-o", str(library)], cwd=tmp_path, check=True)
    subprocess.run(["cc", "-O1", "main.c", "-L.", "-lhot", f"-Wl,-rpath,{tmp_path}", "-o", "main"], cwd=tmp_path,
                   check=True)
    data = str(tmp_path / "perf.data")
    subprocess.run([shutil.which("perf"), "record", "-q", "-F", str(perf.FREQUENCY), "--no-buildid-cache", "-o", data,
                    "--", str(tmp_path / "main")], check=True, capture_output=True, timeout=300)
    samples, mappings = perf.parse_script(perf.script(shutil.which("perf"), data))
    in_library = sum(s.dso == str(library) for s in samples)
    assert in_library > 0
    lines = source_lines({str(library)}, samples, mappings)
    assert lines and {line.file for line in lines} == {"hot.c"}
    assert {line.line for line in lines} <= {1, 2, 3, 4, 5} and lines[0].line == 3
    source = HOT_C.splitlines()
    assert all(line.text == source[line.line - 1].strip() for line in lines)
    assert sum(line.samples for line in lines) <= in_library


def refusing_perf(tmp_path: Path) -> Path:
    """A stand-in perf that answers as perf does where kernel.perf_event_paranoid forbids sampling, and
    counts its calls."""
    fake = tmp_path / "perf"
    fake.write_text(f"#!/bin/sh\necho x >> {tmp_path / 'calls'}\necho 'Error:\nAccess to performance monitoring "
                    "and observability operations is limited.\nConsider adjusting /proc/sys/kernel/"
                    "perf_event_paranoid setting to open access' >&2\nexit 255\n")
    fake.chmod(0o755)
    return fake


def test_a_refused_perf_is_said_in_one_sentence_tried_once_and_the_torch_rows_remain(tmp_path):
    profiler = Profiler("cpu", perf=str(refusing_perf(tmp_path)))
    first, second = (profiler(ProfileRequest(str(SMALL), str(PY), "cpu")) for _ in range(2))
    assert (tmp_path / "calls").read_text().count("x") == 1
    note = first.sampling.note
    assert "kernel.perf_event_paranoid" in note and note.endswith("the torch profiler's ops alone.")
    assert note.count(". ") == 0 and second.sampling.note == note
    assert {"aten::mean", "aten::var"} <= {k.name for k in first.kernels}
    assert profile_lines(first)[-1] == note


def test_without_perf_the_profile_says_so_and_keeps_the_torch_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no perf on it; the worker starts from sys.executable
    result = Profiler("cpu")(ProfileRequest(str(SMALL), str(PY), "cpu"))
    assert result.sampling.note == perf.NOT_INSTALLED and not result.sampling.functions
    assert {"aten::mean", "aten::var"} <= {k.name for k in result.kernels}
    assert json.loads(to_json(result))["sampling"]["note"] == perf.NOT_INSTALLED
