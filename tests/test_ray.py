"""`harness sweep --ray`: the CPU sweep suite on a local Ray cluster of two nodes gives the local
sweep's verdicts and figures; a node removed mid-suite loses nothing and duplicates nothing; a
candidate that kills its actor every time ends as a crashed record, not a hang; with one node
offering the timing slot, the others build, and what they built loads where it is timed."""
import dataclasses
import json
import shutil
import threading
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from conftest import CANDIDATES as FILES, PROBLEMS as PROBLEM_FILES  # noqa: E402
from harness.cli.main import main  # noqa: E402
from harness.engine.building.cache import BuildEntry  # noqa: E402
from harness.engine.building.extensions import extension_dir  # noqa: E402
from harness.engine.building.shipping import Toolchain, land, pack  # noqa: E402
from harness.sweep.jobs import find_jobs  # noqa: E402
from harness.sweep.records import RESULTS_FILE, ResultLog, read_records  # noqa: E402
from test_sweep import CANDIDATES, EXPECTED, PROBLEMS  # noqa: E402

# Kills the Ray worker that timed it: the first process above it that is one (a fork server, where
# workers are forked from one, sits between).
KILLS_ITS_ACTOR = """import os
import signal

import torch.nn as nn


def actor():
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if any(name in f.read() for name in (b"ray::", b"default_worker")):
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return os.getppid()


os.kill(actor(), signal.SIGKILL)


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
"""


@pytest.fixture(scope="module")
def cluster():
    """A head and one more node, one CPU each: one timing actor per node."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def sweep(out, cache_dir, *extra, problems=PROBLEMS, candidates=CANDIDATES):
    return main(["sweep", str(problems), str(candidates), "--device", "cpu", "--time-cap", "0.5",
                 "--cache-dir", str(cache_dir), "-o", str(out), *extra])


FIGURES = ("level", "evaluations", "correct", "correctness", "fast_p", "fast_p_compile", "broken_problems",
           "failures")


def test_ray_bench_gives_the_local_bench_verdicts_and_figures(cluster, tmp_path, cache_dir):
    assert sweep(tmp_path / "local", cache_dir) == 0
    assert sweep(tmp_path / "ray", cache_dir, "--ray", cluster.address) == 0
    local, remote = (read_records(tmp_path / d / RESULTS_FILE) for d in ("local", "ray"))
    assert {r.key: r.verdict for r in remote} == {r.key: r.verdict for r in local} == EXPECTED
    assert len(remote) == len(EXPECTED)
    summaries = [json.loads((tmp_path / d / "summary.json").read_text()) for d in ("local", "ray")]
    assert [[{k: s[k] for k in FIGURES} for s in summary] for summary in summaries[1:]] == \
           [[{k: s[k] for k in FIGURES} for s in summaries[0]]]


def test_a_node_removed_mid_suite_loses_and_duplicates_nothing(cluster, tmp_path, cpu_options):
    from harness.sweep.ray_backend import RaySweep

    doomed = cluster.add_node(num_cpus=1)  # a third node, so the others stay for the next tests
    cluster.wait_for_nodes()
    busy = threading.Event()

    def on_phase(slot, doing):
        if doomed.node_id[:6] in slot and "checking" in doing:
            busy.set()  # a candidate in flight on the doomed node

    log = ResultLog(tmp_path, resume=False)
    runner = RaySweep(cluster.address, cpu_options, log, on_phase=on_phase)
    records = []
    thread = threading.Thread(target=lambda: records.extend(runner.run(find_jobs(PROBLEMS, CANDIDATES))))
    thread.start()
    assert busy.wait(240), "the second node never took a candidate"
    cluster.remove_node(doomed)
    thread.join(300)
    log.close()
    assert not thread.is_alive(), "the sweep did not finish without the node"
    keys = [r.key for r in read_records(tmp_path / RESULTS_FILE)]
    assert len(keys) == len(set(keys)), "an evaluation was recorded twice"
    assert {r.key: r.verdict for r in records} == EXPECTED
    assert runner.lost, "nothing was in flight on the removed node"


def test_a_candidate_that_keeps_killing_its_actor_is_recorded_as_crashed(cluster, tmp_path, cache_dir):
    problems, candidates = tmp_path / "problems", tmp_path / "candidates" / "1"
    problems.mkdir()
    candidates.mkdir(parents=True)
    shutil.copy(PROBLEMS / "level1" / "1_scale.py", problems / "1_scale.py")
    shutil.copy(CANDIDATES / "level1" / "1" / "sample_0.py", candidates / "sample_0.py")
    (candidates / "sample_1.py").write_text(KILLS_ITS_ACTOR)
    assert main(["sweep", str(problems), str(tmp_path / "candidates"), "--device", "cpu", "--time-cap", "0.5",
                 "--cache-dir", str(cache_dir), "-o", str(tmp_path / "out"), "--ray", cluster.address]) == 0
    records = {r.candidate: r for r in read_records(tmp_path / "out" / RESULTS_FILE)}
    assert records["1/sample_0.py"].verdict == "correct"  # retried alone, away from the other
    assert records["1/sample_1.py"].verdict == "crashed"
    assert "died 3 times" in records["1/sample_1.py"].explanation


def test_builds_run_on_the_nodes_that_do_not_time_and_load_where_timed(cluster, tmp_path):
    """One node offers the timing slot (the TIMING resource); the others time nothing and build:
    the C++ candidate compiles on one of them, into a fresh cache, and the others' builds (one with
    nothing to compile, one refused unparsed) end there too. The verdicts are a local sweep's, and
    the C++ entry, carried as bytes into an emptied cache, loads there without a build."""
    from harness.sweep.ray_backend import TIMING

    timing = cluster.add_node(num_cpus=1, resources={TIMING: 1})
    cluster.wait_for_nodes()
    problems, candidates = tmp_path / "problems", tmp_path / "candidates" / "small_layernorm"
    problems.mkdir()
    candidates.mkdir(parents=True)
    shutil.copy(PROBLEM_FILES / "small_layernorm.py", problems)
    for name in ("cpp_layernorm", "py_wrong"):
        shutil.copy(FILES / f"{name}.py", candidates)
    (candidates / "unparsed.py").write_text("class ModelNew(:\n")  # refused before any build, there
    cache = tmp_path / "cache"  # fresh: the C++ candidate is built in this sweep, where the test can see
    try:
        assert sweep(tmp_path / "ray", cache, "--ray", cluster.address, problems=problems,
                     candidates=candidates.parent) == 0
    finally:
        cluster.remove_node(timing)
    remote = {r.key: r for r in read_records(tmp_path / "ray" / RESULTS_FILE)}
    builders = {node.node_id[:6] for node in cluster.list_all_nodes()}  # the timing node is gone from it
    assert timing.node_id[:6] not in builders
    for record in remote.values():
        assert "builds" in record.built_on and record.built_on.split()[1] in builders, record
    cpp = remote[("problems", "small_layernorm", "small_layernorm/cpp_layernorm.py")]
    assert cpp.phases["build"] > 0  # compiled there, not found in a cache

    (entry,) = [BuildEntry(cache, (FILES / "cpp_layernorm.py").read_text(), "cpu")]
    (extension,) = [extension_dir(entry.extensions, key) for key in entry.recorded().extensions]
    library = next(extension.glob("*.so"))
    built = library.stat().st_mtime_ns
    data = pack(entry)
    shutil.rmtree(entry.dir)  # as on a node of its own: the entry and its extension are not there until they land
    shutil.rmtree(extension)
    land(entry, data)
    assert sweep(tmp_path / "local", cache, problems=problems, candidates=candidates.parent) == 0
    local = {r.key: r for r in read_records(tmp_path / "local" / RESULTS_FILE)}
    assert {k: r.verdict for k, r in local.items()} == {k: r.verdict for k, r in remote.items()} == {
        ("problems", "small_layernorm", f"small_layernorm/{name}.py"): verdict for name, verdict in
        (("cpp_layernorm", "correct"), ("unparsed", "import_error"), ("py_wrong", "incorrect"))}
    assert local[cpp.key].phases["build"] == 0 and library.stat().st_mtime_ns == built  # loaded, not rebuilt


def test_nodes_whose_builds_would_not_load_on_each_other_stop_the_sweep_saying_what_differs(tmp_path):
    from harness.sweep.jobs import SuiteError
    from harness.sweep.ray_actors import Facts
    from harness.sweep.ray_backend import RaySweep

    here = Toolchain.here(tmp_path)
    gpu = Facts("10.0.0.1 a1b2c3 gpu 0", here, "9.0", 14)
    farm = Facts("10.0.0.2 d4e5f6 builds", dataclasses.replace(here, torch="2.10.0+cu128"), "", 16)
    RaySweep._check(SimpleNamespace(address="head:6379"), gpu, dataclasses.replace(farm, toolchain=here))
    with pytest.raises(SuiteError, match=r"10.0.0.1 a1b2c3 gpu 0 and 10.0.0.2 d4e5f6 builds differ in torch .* "
                                         r"against 2.10.0\+cu128\. Give every node the same torch"):
        RaySweep._check(SimpleNamespace(address="head:6379"), gpu, farm)
