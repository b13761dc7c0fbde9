"""`harness doctor`: what it finds, how it says so, and its exit status."""
import fcntl
import json
import re
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from harness.device import nvidia_smi
from harness.engine.building import pch
from harness.cli.main import main
from harness.engine.doctor import Diagnosis, diagnose
from harness import from_dict, to_dict


def by_name(diagnosis: Diagnosis) -> dict:
    return {c.name: c for c in diagnosis.checks}


def test_cpu_diagnosis_reports_torch_compilers_and_cache(tmp_path):
    cache = tmp_path / "cache"
    (cache / "builds" / "entry").mkdir(parents=True)
    (cache / "builds" / "entry" / "build.log").write_bytes(b"x" * 1000)
    diagnosis = diagnose("cpu", cache)
    checks = by_name(diagnosis)
    assert {"GPU", "torch", "nvcc", "C++ compiler", "ninja", "Python headers", "ncu", "build cache",
            "precompiled header"} == set(checks)
    assert checks["torch"].ok and torch.__version__ in checks["torch"].found
    assert checks["C++ compiler"].ok and checks["ninja"].ok
    assert str(cache) in checks["build cache"].found and "1 build(s)" in checks["build cache"].found
    assert diagnosis.cache_bytes == 1000
    # on cpu neither a GPU nor nvcc is needed, nor the precompiled header
    assert not (checks["GPU"].needed or checks["nvcc"].needed or checks["precompiled header"].needed)
    assert diagnosis.ok
    assert from_dict(Diagnosis, json.loads(json.dumps(to_dict(diagnosis)))) == diagnosis


def report_gpus(path) -> list:
    return json.loads(path.read_text()).get("gpus") or []


def test_cli_prints_a_table_and_exits_0_when_ready(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    cache, out = tmp_path / "given-cache", tmp_path / "doctor.json"
    assert main(["doctor", "--device", "cpu", "--cache-dir", str(cache), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "harness doctor (device cpu)" in text and "build cache" in text and str(cache) in text
    assert "Ready for cpu." in text
    if not report_gpus(out):  # a machine without a GPU is not told its GPU is ok
        assert re.search(r"GPU\s+none, not needed", text) and not re.search(r"GPU\s+ok", text), text
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["cache_dir"] == str(cache)


def test_cli_exits_1_and_says_how_to_fix_a_missing_compiler(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert main(["doctor", "--device", "cpu", "--cache-dir", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    assert "'no-such-compiler-here'" in text and "Install g++" in text
    assert "Not ready for cpu: C++ compiler" in text


@pytest.mark.skipif(bool(nvidia_smi("name")), reason="a GPU is present")
def test_cuda_without_a_gpu_is_not_ready(tmp_path):
    diagnosis = diagnose("cuda", tmp_path)
    gpu = by_name(diagnosis)["GPU"]
    assert gpu.needed and not gpu.ok and "--device cpu" in gpu.fix
    assert not diagnosis.ok


def test_pch_status_never_builds_the_header():
    started = time.monotonic()
    status = pch.pch_status()
    assert status in ("ready", "missing", "stale", "unsupported")
    assert pch.pch_ready() == (status == "ready")
    assert time.monotonic() - started < 15  # building it takes 45 s or more


def test_prepare_pch_holds_the_lock_and_calls_torch_with_the_device_idioms_flags(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    calls = []

    def fake(extra_cflags, extra_include_paths, is_standalone=False):
        with open(pch.pch_lock_path(tmp_path)) as f:  # another open file: blocked while prepare_pch holds it
            with pytest.raises(BlockingIOError):
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        calls.append((extra_cflags, extra_include_paths))

    monkeypatch.setattr(cpp_extension, "_check_and_build_extension_h_precompiler_headers", fake)
    monkeypatch.setattr(pch, "pch_path", lambda: tmp_path / "torch" / "extension.h.gch")
    (tmp_path / "torch").mkdir()
    assert pch.prepare_pch(tmp_path) >= 0
    assert pch.prepare_pch(tmp_path, device="cpu") >= 0
    assert calls == [(None, None), (["-O3"], None)]  # the GPU idiom passes no extra_cflags, the CPU one -O3


def test_prepare_pch_failure_is_one_paragraph_with_the_compiler_error(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    def failing(*args, **kwargs):
        try:
            raise subprocess.CalledProcessError(1, ["c++"], output=b"extension.h:3:10: fatal error: boom.h: No such file")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError("Compile PreCompile Header fail, command: c++ ...") from exc

    monkeypatch.setattr(cpp_extension, "_check_and_build_extension_h_precompiler_headers", failing)
    monkeypatch.setattr(pch, "pch_path", lambda: tmp_path / "torch" / "extension.h.gch")
    (tmp_path / "torch").mkdir()
    with pytest.raises(pch.PchError) as caught:
        pch.prepare_pch(tmp_path)
    message = str(caught.value)
    assert "boom.h: No such file" in message and str(tmp_path / "torch" / "extension.h.gch") in message
    assert "\n" not in message


def test_ncu_check_says_what_is_missing_and_how_to_fix_it(tmp_path):
    from harness.engine.doctor import check_ncu

    absent = check_ncu(True, ncu=str(tmp_path / "no-ncu"))
    assert not absent.ok and not absent.needed and "Nsight Compute" in absent.fix
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho 'Version 2025.3.0.0'\n")
    fake.chmod(0o755)
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    import os
    restricted = check_ncu(True, ncu=str(fake), params=params)
    if os.geteuid() != 0:
        assert not restricted.ok and "NVreg_RestrictProfilingToAdminUsers=0" in restricted.fix
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert check_ncu(True, ncu=str(fake), params=params).found.endswith("Version 2025.3.0.0; counters readable")


def test_prepare_pch_writes_the_header_aside_and_renames_it_whole(tmp_path, monkeypatch):
    """Builds may run while the header is made: g++ must never find a half-written one."""
    from torch.utils import cpp_extension

    if pch.pch_status() == "unsupported":
        pytest.skip("torch precompiles headers only with g++ on Linux")
    include = tmp_path / "torch-install" / "include" / "torch"
    include.mkdir(parents=True)
    (include / "extension.h").write_text("#pragma once\ninline int harness_probe() { return 7; }\n")
    header = include / "extension.h.gch"
    monkeypatch.setattr(cpp_extension, "_TORCH_PATH", str(tmp_path / "torch-install"))
    monkeypatch.setattr(pch, "pch_path", lambda: header)
    seen = tmp_path / "seen"
    # the runner prefix runs the compile, after noting whether the final name existed then
    runner = ["sh", "-c", f'test -e {header} && echo present > {seen} || echo absent > {seen}; exec "$@"', "runner"]
    assert pch.pch_status() == "missing"
    assert pch.prepare_pch(tmp_path, runner) >= 0
    assert seen.read_text().strip() == "absent"  # compiled under another name
    assert header.is_file() and header.stat().st_size > 0
    assert not list(include.glob("*.partial"))
    assert pch.pch_status() == "ready"


def test_a_build_finding_the_header_being_made_compiles_without_it_rather_than_wait(tmp_path, monkeypatch):
    """The build child's hook on torch's header step: while another process holds the header's
    lock (making it), the step is skipped at once; with the lock free, torch's step runs."""
    from torch.utils import cpp_extension

    from harness.engine.workers.common import serialize_pch_builds

    calls = []
    monkeypatch.setattr(cpp_extension, "_check_and_build_extension_h_precompiler_headers",
                        lambda *args, **kwargs: calls.append(args))
    monkeypatch.setattr(cpp_extension, "remove_extension_h_precompiler_headers",
                        cpp_extension.remove_extension_h_precompiler_headers)
    lock = tmp_path / "pch.lock"
    serialize_pch_builds(str(lock))
    step = cpp_extension._check_and_build_extension_h_precompiler_headers
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        # a step that waited for the lock would never return while this test holds it
        waiter = threading.Thread(target=step, args=(None, None), daemon=True)
        waiter.start()
        waiter.join(timeout=120)
        assert not waiter.is_alive() and calls == []  # skipped, not waited for
        fcntl.flock(held, fcntl.LOCK_UN)
    step(None, None)
    assert calls == [(None, None)]


FAKE_MAKER = """
import sys, time
from harness.engine.building import pch
def made(runner):
    time.sleep(2)
    open(sys.argv[2], "w").write("made")
    return 2.0
pch._make_pch = made
pch._pch_maker(sys.argv[1], [])
"""
# A harness process that starts the header's maker and exits at once.
STARTER = """
import sys
from pathlib import Path
from harness.engine.building import pch
cache, maker, made = sys.argv[1:]
pch.pch_status = lambda: "missing"
pch.pch_path = lambda: Path(cache) / "torch" / "extension.h.gch"
pch._maker_command = lambda lock, runner: [sys.executable, maker, lock, made]
print(pch.start_pch_aside(Path(cache)), pch.start_pch_aside(Path(cache)))
"""


def test_the_header_is_made_aside_by_a_process_that_holds_its_lock_and_outlives_the_harness(tmp_path, monkeypatch):
    """start_pch_aside returns once its maker holds the lock (a build child then skips the header),
    once per process; the maker finishes after the harness process has exited. Torch's real header
    takes minutes of CPU here, so the maker's compile is a stand-in; the processes, the lock and
    the handshake are real."""
    maker, starter, made = tmp_path / "maker.py", tmp_path / "starter.py", tmp_path / "made"
    maker.write_text(FAKE_MAKER)
    starter.write_text(STARTER)
    (tmp_path / "torch").mkdir()
    monkeypatch.setattr(pch, "pch_path", lambda: tmp_path / "torch" / "extension.h.gch")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    said = subprocess.run([sys.executable, str(starter), str(tmp_path), str(maker), str(made)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert said.stdout.split() == ["True", "False"], said.stderr  # started, then not again
    with open(pch.pch_lock_path(tmp_path), "a") as f:  # the maker holds it, its starter gone
        with pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert not made.exists()
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the header is made
    assert made.read_text() == "made"


def test_no_header_is_started_where_it_is_ready_or_another_process_makes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(pch, "pch_path", lambda: tmp_path / "torch" / "extension.h.gch")
    (tmp_path / "torch").mkdir()
    monkeypatch.setattr(pch, "_pch_looked", False)
    monkeypatch.setattr(pch, "pch_status", lambda: "ready")
    assert pch.start_pch_aside(tmp_path) is False
    monkeypatch.setattr(pch, "_pch_looked", False)
    monkeypatch.setattr(pch, "pch_status", lambda: "missing")
    lock = pch.pch_lock_path(tmp_path)
    with open(lock, "a") as f:  # another process makes it: the maker says busy and ends, untouched
        fcntl.flock(f, fcntl.LOCK_EX)
        assert pch.start_pch_aside(tmp_path) is False
        said = subprocess.run(pch._maker_command(str(lock), []), capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[1])
        assert (said.returncode, said.stdout) == (0, "busy\n"), said.stderr
