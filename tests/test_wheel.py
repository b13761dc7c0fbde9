"""A wheel of the harness works on its own: built, installed into a fresh environment and
run from outside the repository, it finds its prompt templates and finishes a run."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import PROBLEMS, REPO
from harness.export.package import fresh_venv

FAST = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n\n"
        "    def forward(self, x):\n        return torch.tanh(x) * self.scale + 1.0\n")


def test_a_wheel_runs_a_files_run_outside_the_repository(tmp_path, cache_dir):
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the repository
    for name in ("harness", "prompts"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, capture_output=True)
    venv = tmp_path / "venv"
    # torch and the other dependencies come from this interpreter's site-packages
    fresh_venv(venv)
    subprocess.run([venv / "bin" / "pip", "install", "--no-deps", "--no-index", "-q", *wheels.glob("*.whl")],
                   check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing may lead back to a checkout
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copy(PROBLEMS / "row_loop.py", work / "row_loop.py")
    (work / "fast.py").write_text(FAST)
    where = subprocess.run([venv / "bin" / "python", "-c", "import harness; print(harness.__file__)"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout
    site = Path(where.strip()).parent.parent
    packages = {init.parent.relative_to(REPO).as_posix() for init in (REPO / "harness").rglob("__init__.py")}
    missing = sorted(p for p in packages if not (site / p / "__init__.py").exists())
    assert not missing, f"packages the wheel leaves out (pyproject.toml lists them one by one): {missing}"
    done = subprocess.run([venv / "bin" / "harness", "run", "row_loop.py", "--proposer", "files", "--files",
                           "fast.py", "--device", "cpu", "--time-cap", "0.5", "--cache-dir", str(cache_dir)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = (work / "runs").iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
