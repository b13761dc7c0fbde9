import os
from pathlib import Path

import pytest

# pytest-xdist hands its workers the controller's terminal size as COLUMNS and LINES, which the
# CLI would honour; the tests read the CLI as a pipe does, whoever runs them
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates"
PROBLEMS = HERE / "problems"
SEEDS = HERE / "seeds"
REPO = HERE.parent


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_xdist_auto_num_workers(config):
    """Test processes for `-n auto` (pyproject's addopts): a test spends much of its time waiting on
    the harness's children, so one process more than the cores keeps them busy (three on the 2-core
    CI machine: its suite from 22 to 11-12 minutes), at most four; the GPU tests (-m gpu) one at a
    time, in pytest's own process, as they time on one device."""
    marks = config.option.markexpr or ""
    if "gpu" in marks and "not gpu" not in marks:
        return 0
    return min(4, len(os.sched_getaffinity(0)) + 1)


# The files that take longest on the 2-core CI machine (wall seconds in one run, 625 passed in 608 s),
# handed out first (pyproject's --no-loadscope-reorder keeps this order): a long file handed out last
# runs alone at the end (test_ray, started 400 s into that run, ended it at 591 s; the others had
# ended at 532 and 542).
LONGEST_FIRST = ("test_ray.py",  # 177 s
                 "test_loop.py",  # 156
                 "test_eval.py",  # 149
                 "test_export.py",  # 103
                 "test_sweep.py",  # 99
                 "test_processes.py",  # 88
                 "test_pool.py",  # 88
                 "test_build_ahead.py",  # 82
                 "test_mcp.py",  # 76
                 "test_shapes.py",  # 76
                 "test_lean_build.py",  # 70 (alone; its nvcc compiles of torch's headers, one full)
                 "test_quickstart.py",  # 65
                 "test_backward.py")  # 60


def pytest_collection_modifyitems(config, items):
    first = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest keep their order
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One build cache for the whole session, so real builds happen once: shared by pytest-xdist's
    workers too (their base folders sit side by side), whose builds of one source wait for each
    other on the entry's lock as any two harness processes do."""
    if os.environ.get("HARNESS_TEST_CACHE"):
        return Path(os.environ["HARNESS_TEST_CACHE"])
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "build-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def cpu_options(cache_dir):
    from harness.engine.evaluate import EvalOptions

    return EvalOptions(device="cpu", cache_dir=cache_dir, run_timeout=60, build_timeout=300,
                       time_cap=0.5, min_samples=5)


@pytest.fixture
def reference_starts(monkeypatch):
    """The problem of every reference process the engine starts (Children._spawn_reference)."""
    started = []
    from harness.engine.children import Children

    spawn = Children._spawn_reference

    def counted(self, spare=False):
        started.append(self.problem.name)
        return spawn(self, spare)

    monkeypatch.setattr(Children, "_spawn_reference", counted)
    return started
