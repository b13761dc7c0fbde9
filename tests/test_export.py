"""`harness export` of a CPU C++ candidate: installed into a fresh venv, checked with
opcheck, and traced by torch.compile(fullgraph=True), all in that venv's python."""
import os
import subprocess
import sys

import pytest

from conftest import CANDIDATES, REPO
from harness.runs.export import ExportError, export

CHECK = '''
import torch
import mykernels_layer_norm as m

x = torch.randn(4, 16, 32)
model = m.ModelNew((16, 32))
with torch.no_grad():
    model.weight.add_(torch.randn_like(model.weight))
args = (x, model.weight.detach(), model.bias.detach(), 1e-5)
torch.library.opcheck(torch.ops.mykernels.layer_norm.default, args)
eager = model(x)
expected = torch.nn.functional.layer_norm(x, (16, 32), model.weight, model.bias)
assert torch.allclose(eager, expected, atol=1e-4), "the op differs from layer_norm"
compiled = torch.compile(model, fullgraph=True, backend="eager")(x)
assert torch.equal(compiled, eager), "compiled differs from eager"
print("EXPORT OK")
'''


def test_export_installs_and_traces(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    out = tmp_path / "pkg"
    done = subprocess.run([sys.executable, "-m", "harness", "export", str(CANDIDATES / "cpp_layernorm.py"),
                           "--name", "mykernels::layer_norm", "-o", str(out)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "pyproject.toml").is_file() and "No figures" in (out / "README.md").read_text()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    # built by this python, whose setuptools makes wheels (as tests/test_wheel.py does), installed into the venv
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(out)], check=True, timeout=300)
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", *map(str, wheels.glob("*.whl"))],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    run = subprocess.run([python, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in env.items() if k != "PYTHONPATH"})
    assert "EXPORT OK" in run.stdout, run.stderr[-3000:]


@pytest.mark.parametrize("name, says", [
    ("py_correct", "load_inline"),
    ("cpp_fixed_rows", None),
])
def test_export_refuses_or_accepts_statically(tmp_path, name, says):
    if says is None:
        assert export(str(CANDIDATES / f"{name}.py"), "k::softmax", tmp_path / "o", tmp_path).module == "k_softmax"
        return
    with pytest.raises(ExportError, match=says):
        export(str(CANDIDATES / f"{name}.py"), "k::op", tmp_path / "o", tmp_path)


def test_export_refuses_work_outside_the_call(tmp_path):
    source = (CANDIDATES / "cpp_layernorm.py").read_text().replace(
        "return ext.layer_norm(x, self.weight, self.bias, 1e-5)",
        "y = ext.layer_norm(x, self.weight, self.bias, 1e-5)\n        return y * 2")
    path = tmp_path / "two_steps.py"
    path.write_text(source)
    with pytest.raises(ExportError, match="one call"):
        export(str(path), "k::op", tmp_path / "o", tmp_path)
    with pytest.raises(ExportError, match="lib::op"):
        export(str(path), "bad name", tmp_path / "o", tmp_path)
