"""A sweep builds every candidate ahead, in one shared build pool bounded by --jobs and by host
memory, and on the CPU no build runs while a candidate is checked or timed; builds and timing
processes run on the cores cores.py gives them."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

from conftest import CANDIDATES, PROBLEMS
from harness.engine.processes.cores import (BUILD_MEMORY_BYTES, CPUS_ENV, NICE_ENV, SPARE_CPUS_ENV, WARM_DEVICE_ENV,
                                            WARM_LOCK_ENV,
                                            Cores, build_slots, split_cores)
from harness.sweep.sweep import Sweep
from harness.sweep.jobs import find_jobs
from harness.sweep.records import ResultLog

SMALL = PROBLEMS / "small_layernorm.py"


def cpp_candidate(path, name: str):
    """The C++ LayerNorm as a source of its own (so a build of its own), same behaviour."""
    source = (CANDIDATES / "cpp_layernorm.py").read_text()
    path.write_text(source.replace("cpp_layernorm_test", f"cpp_layernorm_{name}"))


def suite(tmp_path, problems: int):
    """`problems` copies of small_layernorm, each with a C++ candidate and a Python one."""
    problem_dir, candidates = tmp_path / "problems", tmp_path / "candidates"
    problem_dir.mkdir()
    for n in range(problems):
        stem = f"{n + 1}_layernorm"
        shutil.copy(SMALL, problem_dir / f"{stem}.py")
        (candidates / stem).mkdir(parents=True)
        cpp_candidate(candidates / stem / "a_cpp.py", f"ahead_{n}_{tmp_path.name[-8:]}")
        shutil.copy(CANDIDATES / "py_correct.py", candidates / stem / "b_py.py")
    return find_jobs(problem_dir, candidates)


def run_sweep(tmp_path, cpu_options, problems: int, **sweep_args):
    """A sweep on a fresh build cache; returns it with every phase event's time and the records."""
    options = dataclasses.replace(cpu_options, cache_dir=tmp_path / "cache")
    events, log = [], ResultLog(tmp_path / "out", resume=False)
    sweep = Sweep(options, None, log, on_phase=lambda slot, text: events.append((time.monotonic(), text)),
                  **sweep_args)
    try:
        records = sweep.run(suite(tmp_path, problems))
    finally:
        log.close()
    return sweep, events, records


def most_at_once(spans) -> int:
    edges = sorted([(start, 1) for _, start, _ in spans] + [(end, -1) for _, _, end in spans])
    running = peak = 0
    for _, step in edges:  # an end sorts before a start at the same instant: touching is not overlap
        running += step
        peak = max(peak, running)
    return peak


def test_every_candidate_builds_before_the_first_check_and_no_more_than_jobs_at_once(tmp_path, cpu_options):
    sweep, events, records = run_sweep(tmp_path, cpu_options, problems=2, build_jobs=2)
    assert sorted((r.problem, r.candidate.split("/")[-1], r.verdict) for r in records) == [
        (p, c, "correct") for p in ("1_layernorm", "2_layernorm") for c in ("a_cpp.py", "b_py.py")]
    spans = sweep.builds.spans
    assert len(spans) == 4 and sweep.builds.done == sweep.builds.total == 4
    # the second problem's C++ build started with the first one's: both problems' builds were handed in at once
    cpp = sorted(start for path, start, _ in spans if path.endswith("a_cpp.py"))
    first_check = min(t for t, text in events if text.endswith(": checking"))
    assert cpp[1] < min(end for path, _, end in spans if path.endswith("a_cpp.py"))
    assert most_at_once(spans) == 2  # the two C++ builds side by side, never a third beside them
    # on the CPU the compilers would share the cores with the timed code: every build ends first
    assert max(end for _, _, end in spans) <= first_check


def test_a_memory_bound_of_one_build_keeps_builds_apart(tmp_path, cpu_options):
    """One problem is enough: its two builds, handed in at once, would overlap in the two slots
    --jobs gives (the test above); a second C++ build would only add its 20 CPU seconds."""
    sweep, _, records = run_sweep(tmp_path, cpu_options, problems=1, build_jobs=2,
                                  build_memory=BUILD_MEMORY_BYTES + BUILD_MEMORY_BYTES // 2)
    assert sweep.builds.slots == 1
    assert [r.verdict for r in records] == ["correct"] * 2
    assert len(sweep.builds.spans) == 2 and most_at_once(sweep.builds.spans) == 1


def test_build_slots_are_jobs_bounded_by_memory():
    assert build_slots(8, memory=20 * BUILD_MEMORY_BYTES) == 8
    assert build_slots(8, memory=3 * BUILD_MEMORY_BYTES + 1) == 3
    assert build_slots(8, memory=BUILD_MEMORY_BYTES // 2) == 1  # always one, however short memory is
    assert build_slots(8, memory=0) == 8  # nothing known of the memory: --jobs alone


def test_a_gpu_host_keeps_two_cores_a_gpu_for_timing_and_a_small_one_none():
    sixteen = tuple(range(16))
    assert split_cores("cuda", sixteen, gpus=1) == Cores((14, 15), tuple(range(14)))
    assert split_cores("cuda", sixteen, gpus=1, gpu=0) == Cores((14, 15), tuple(range(14)))
    assert split_cores("cuda", (0, 1, 2, 3), gpus=1) == Cores((2, 3), (0, 1))
    assert split_cores("cuda", (0, 1), gpus=1) == Cores((), (0, 1))  # nothing to spare on 2 cores
    assert split_cores("cpu", sixteen, gpus=1) == Cores((), sixteen)  # the CPU times on every core
    # two cores for each GPU, never more than half the host; each GPU's processes on its own pair
    thirty_two = tuple(range(32))
    assert split_cores("cuda", thirty_two, gpus=2) == Cores((28, 29, 30, 31), tuple(range(28)))
    assert split_cores("cuda", thirty_two, gpus=2, gpu=0) == Cores((28, 29), tuple(range(28)))
    assert split_cores("cuda", thirty_two, gpus=2, gpu=1) == Cores((30, 31), tuple(range(28)))
    assert split_cores("cuda", sixteen, gpus=4) == Cores(tuple(range(8, 16)), tuple(range(8)))
    assert split_cores("cuda", sixteen, gpus=8) == Cores(tuple(range(8, 16)), tuple(range(8)))
    assert split_cores("cuda", sixteen, gpus=8, gpu=3) == Cores((11,), tuple(range(8)))  # a core each
    # fewer cores to keep than GPUs: they share what is kept
    assert split_cores("cuda", (0, 1, 2, 3, 4, 5), gpus=8, gpu=5) == Cores((3, 4, 5), (0, 1, 2))
    gpu = split_cores("cuda", sixteen, gpus=1)
    assert gpu.timing_env() == {CPUS_ENV: "14,15"}
    assert gpu.build_env() == {CPUS_ENV: ",".join(map(str, range(14))), NICE_ENV: "10"}
    assert gpu.timing_env(spare=True) == {CPUS_ENV: "14,15", SPARE_CPUS_ENV: ",".join(map(str, range(14)))}
    small = split_cores("cuda", (0, 1), gpus=1)
    assert small.timing_env() == small.timing_env(spare=True) == {} and small.build_env() == {NICE_ENV: "10"}


def test_a_spare_on_a_gpu_is_told_to_make_its_cuda_context_while_it_waits(tmp_path, monkeypatch):
    """Its first candidate's start then does not pay for the context; on a CPU there is none to make.
    A reference's spare also makes its first calls, under the device's lock; a worker's spare does not
    (its first trial holds no lock)."""
    from harness import EvalOptions
    from harness.engine import children as module
    from harness.engine.children import Children
    from harness.problem import load_problem

    problem = load_problem(SMALL)
    gpu = Children(problem, EvalOptions(device="cuda", cache_dir=tmp_path), backward=False)
    monkeypatch.setattr(module, "Child", lambda role, log, env, **kwargs: env)  # the environment each is started with
    reference, worker = gpu._spawn_reference(spare=True), gpu._spawn_worker(spare=True)
    assert reference[WARM_DEVICE_ENV] == worker[WARM_DEVICE_ENV] == "cuda"
    # the reference's first calls under the lock this evaluation times under, on this harness's behalf
    assert json.loads(reference[WARM_LOCK_ENV]) == {"cache": str(tmp_path), "key": "gpu0", "owner": os.getpid()}
    assert WARM_LOCK_ENV not in worker
    assert WARM_DEVICE_ENV not in gpu._start_env(spare=False)  # started for work: the role makes it
    cpu = Children(problem, EvalOptions(device="cpu", cache_dir=tmp_path), backward=False)
    assert WARM_DEVICE_ENV not in cpu._start_env(spare=True)


def test_a_spare_told_to_warm_makes_its_first_calls_and_its_load_records_them(tmp_path, cpu_options, monkeypatch):
    """The spare's path on the CPU (which is never told to: it has no libraries to load): the environment
    read in the forked process, the device's lock taken for the calls, their seconds in the load's record."""
    from harness.engine.children import Children
    from harness.problem import load_problem

    options = dataclasses.replace(cpu_options, cache_dir=tmp_path / "cache")
    children = Children(load_problem(SMALL), options, backward=False)
    told = {WARM_DEVICE_ENV: "cpu",
            WARM_LOCK_ENV: json.dumps({"cache": str(options.cache_dir), "key": "cpu", "owner": os.getpid()})}
    start_env = children._start_env
    monkeypatch.setattr(children, "_start_env", lambda spare, **kwargs: {**start_env(spare, **kwargs), **told})
    try:
        children._blank_reference = children._spawn_reference(spare=True)
        lock, waited = options.cache_dir / "locks" / "device-cpu.lock", time.monotonic() + 120
        while not lock.exists() and time.monotonic() < waited:  # the spare has taken the free lock
            time.sleep(0.05)
        children.start_reference()
        assert children.reference_info.load_seconds["spare_first_calls"] >= 0
        assert lock.read_text() == str(os.getpid())
    finally:
        children.close()


def test_a_spare_imports_on_the_build_cores_and_takes_its_own_with_every_thread_once_it_has_work():
    """A spare's seconds of imports stay off the timing cores; its work, threads started before included, runs on them."""
    first, last = sorted(os.sched_getaffinity(0))[0], sorted(os.sched_getaffinity(0))[-1]
    script = ("import json, os, threading\n"
              "from harness.engine.processes.cores import apply_from_env, take_own_cores\n"
              "apply_from_env()\n"
              "waiting = sorted(os.sched_getaffinity(0))\n"
              "seen, go = [], threading.Event()\n"
              "worker = threading.Thread(target=lambda: (go.wait(), seen.append(sorted(os.sched_getaffinity(0)))))\n"
              "worker.start()\n"
              "take_own_cores()\n"
              "go.set(); worker.join()\n"
              "print(json.dumps([waiting, sorted(os.sched_getaffinity(0)), seen[0]]))\n")
    env = {**os.environ, CPUS_ENV: str(last), SPARE_CPUS_ENV: str(first)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[first], [last], [last]]


def test_a_worker_imports_torchs_extension_module_with_its_roles_not_with_its_candidate():
    """A spare imports its roles ahead of its work; cpp_extension with them keeps its import off a candidate's start."""
    script = "import sys, harness.engine.workers.roles; print('torch.utils.cpp_extension' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


def test_a_child_takes_its_cores_and_priority_and_its_compilers_inherit_them():
    """What a build child does as it starts (workers/__main__.py), and what nvcc under it would see."""
    core = sorted(os.sched_getaffinity(0))[-1]
    script = ("import json, os, subprocess, sys\n"
              "from harness.engine.processes.cores import apply_from_env\n"
              "apply_from_env()\n"
              "child = subprocess.run([sys.executable, '-c', 'import os, json; "
              "print(json.dumps([sorted(os.sched_getaffinity(0)), os.nice(0)]))'], capture_output=True, text=True)\n"
              "print(json.dumps([sorted(os.sched_getaffinity(0)), os.nice(0), json.loads(child.stdout)]))\n")
    env = {**os.environ, CPUS_ENV: str(core), NICE_ENV: "7"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cores, nice, (child_cores, child_nice) = json.loads(out.stdout)
    base = os.nice(0)
    assert cores == child_cores == [core] and nice == child_nice == base + 7


def test_the_live_view_counts_builds_apart_from_evaluations():
    from rich.console import Console

    from harness.cli.sweep import _View

    view = _View(total=50, done=0)
    view.count_builds(50, 14, 12)
    console = Console(width=200, record=True)
    console.print(view.render())
    assert console.export_text().startswith("builds 12/50 done, 14 running · evaluated 0/50")
