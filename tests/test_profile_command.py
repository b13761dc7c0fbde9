"""`harness profile` on CPU: the torch profiler fallback, in a real worker process."""
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.engine.profiling.profile import PERMISSION_FIX, Profiler, ProfileRequest, profile

HERE = Path(__file__).parent
SMALL = HERE / "problems" / "small_layernorm.py"
CANDIDATE = HERE / "candidates" / "py_correct.py"


def test_cpu_candidate_falls_back_to_the_torch_profilers_op_table(tmp_path):
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "-m", "harness", "profile", str(SMALL), str(CANDIDATE), "--device", "cpu",
                           "--json", str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr + done.stdout
    assert "torch profiler, CPU ops" in " ".join(done.stdout.split())
    data = json.loads(out.read_text())
    names = {k["name"] for k in data["kernels"]}
    assert data["tool"] == "torch-cpu" and {"aten::mean", "aten::var"} <= names  # py_correct's own ops
    assert all(k["duration_us"] > 0 for k in data["kernels"])


def test_reference_is_profiled_with_reference():
    result = profile(ProfileRequest(str(SMALL), None, "cpu"))
    assert "aten::layer_norm" in {k.name for k in result.kernels}


def refused_ncu(tmp_path):
    """A stand-in ncu that answers as ncu does for a user who may not read counters, and counts its calls."""
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\necho x >> {tmp_path / 'calls'}\necho '==ERROR== ERR_NVGPUCTRPERM - The user does "
                    "not have permission to access NVIDIA GPU Performance Counters'\nexit 1\n")
    fake.chmod(0o755)
    return fake


def test_ncu_without_counter_permission_says_why_and_falls_back(tmp_path):
    result = profile(ProfileRequest(str(SMALL), str(CANDIDATE), "cpu"), ncu=str(refused_ncu(tmp_path)))
    assert "ERR_NVGPUCTRPERM" in result.note and PERMISSION_FIX in result.note
    assert result.tool == "torch-cpu" and result.kernels


def test_a_refused_ncu_is_tried_once_and_each_profile_keeps_the_reason(tmp_path):
    profiler = Profiler("cpu", ncu=str(refused_ncu(tmp_path)))
    first, second = (profiler(ProfileRequest(str(SMALL), str(CANDIDATE), "cpu")) for _ in range(2))
    assert (tmp_path / "calls").read_text().count("x") == 1
    assert first.note == second.note and "ERR_NVGPUCTRPERM" in second.note


def test_missing_candidate_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "harness", "profile", str(SMALL), "nope.py", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "nope.py does not exist" in done.stderr
