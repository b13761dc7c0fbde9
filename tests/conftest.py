import os
from pathlib import Path

import pytest

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


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One build cache for the whole session, so real builds happen once."""
    path = Path(os.environ.get("HARNESS_TEST_CACHE") or tmp_path_factory.mktemp("cache"))
    return path


@pytest.fixture(scope="session")
def cpu_options(cache_dir):
    from harness.engine.evaluate import EvalOptions

    return EvalOptions(device="cpu", cache_dir=cache_dir, run_timeout=60, build_timeout=300,
                       time_cap=1.0, min_samples=5)


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
