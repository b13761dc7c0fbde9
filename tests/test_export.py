"""`harness export` of a CPU C++ candidate: installed into a fresh venv, checked with
opcheck, and traced by torch.compile(fullgraph=True), all in that venv's python."""
import ast
import os
import subprocess
import sys

import pytest

from conftest import CANDIDATES, REPO
from harness.export.package import ExportError, export, fresh_venv

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
# forward-only: a backward through the op, eager or traced by AOTAutograd, is one clear error
x.requires_grad_()
for fn in (model, torch.compile(model, fullgraph=True, backend="aot_eager")):
    try:
        fn(x).sum().backward()
    except Exception as exc:
        said = str(exc)
        assert "mykernels::layer_norm is forward-only" in said and "harness run --backward" in said, said
        assert "no autograd formula" not in said, said
    else:
        raise AssertionError("a backward went through a forward-only op")
print("EXPORT OK")
'''


# a training kernel: its backward registered (register_autograd), opcheck's gradient checks, and a
# model trained through the op under torch.compile(fullgraph=True) (AOTAutograd's traced forward and
# backward, run eagerly) giving eager's gradients
BACKWARD_CHECK = '''
import torch
import mykernels_rms_norm as m

model = m.ModelNew(128)
with torch.no_grad():
    model.weight.add_(torch.randn_like(model.weight))
x = torch.randn(8, 128, requires_grad=True)
torch.library.opcheck(torch.ops.mykernels.rms_norm.default, (x, model.weight.detach().requires_grad_(), 1e-6))
dy = torch.randn(8, 128)


def grads(fn, x, weight):
    x.grad = weight.grad = None
    fn(x).backward(dy)
    return x.grad.clone(), weight.grad.clone()


eager = grads(model, x, model.weight)
w = model.weight.detach().requires_grad_()
expected = grads(lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, x, w)
assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(eager, expected)), "the op's gradients are wrong"
compiled = grads(torch.compile(model, fullgraph=True, backend="aot_eager"), x, model.weight)
assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(compiled, eager)), "compiled differs from eager"
print("EXPORT OK")
'''


GPU_CHECK = '''
import torch
import harness_kernels_layer_norm_4d as m

x = torch.randn(16, 64, 256, 256, device="cuda")
model = m.ModelNew((64, 256, 256)).cuda()
with torch.no_grad():
    model.weight.add_(torch.randn_like(model.weight))
    model.bias.add_(torch.randn_like(model.bias))
args = (x, model.weight.detach(), model.bias.detach(), 1e-5)
torch.library.opcheck(torch.ops.harness_kernels.layer_norm_4d.default, args)
with torch.no_grad():
    eager = model(x)
    expected = torch.nn.functional.layer_norm(x, (64, 256, 256), model.weight, model.bias)
    assert torch.allclose(eager, expected, atol=1e-4, rtol=1e-4), "the op differs from layer_norm"
    compiled = torch.compile(model, fullgraph=True)(x)
    assert torch.equal(compiled, eager), "compiled differs from eager"
    static = x.clone()
    model(static)  # warm: the graph captures launches, not the first call's setup
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = model(static)
    fresh = torch.randn_like(x)
    static.copy_(fresh)
    graph.replay()
    assert torch.equal(captured, model(fresh)), "graph replay differs from eager"
print("EXPORT OK")
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> str:
    """One fresh venv for the module's exports (each installs a package of its own name into it):
    making one costs a python start and ensurepip's install of pip, about 5 s of CPU."""
    return str(fresh_venv(tmp_path_factory.mktemp("export") / "venv"))


def _install(tmp_path, candidate, name: str, python: str) -> tuple[str, dict]:
    """Export CANDIDATE and pip-install the package into the venv `python` runs; it and the environment."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    out = tmp_path / "pkg"
    done = subprocess.run([sys.executable, "-m", "harness", "export", str(candidate), "--name", name, "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "pyproject.toml").is_file() and "No figures" in (out / "README.md").read_text()
    # built by this python, whose setuptools makes wheels (as tests/test_wheel.py does), installed into the venv
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(out)], check=True, timeout=300)
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", *map(str, wheels.glob("*.whl"))],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    return python, {k: v for k, v in env.items() if k != "PYTHONPATH"}


def test_export_installs_and_traces(tmp_path, venv):
    python, env = _install(tmp_path, CANDIDATES / "cpp_layernorm.py", "mykernels::layer_norm", venv)
    assert "**Forward-only.** mykernels::layer_norm is forward-only" in (tmp_path / "pkg" / "README.md").read_text()
    run = subprocess.run([python, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert "EXPORT OK" in run.stdout, run.stderr[-3000:]


def test_export_of_a_training_kernel_registers_its_backward(tmp_path, venv):
    python, env = _install(tmp_path, CANDIDATES / "backward_cpp_rmsnorm.py", "mykernels::rms_norm", venv)
    text = (tmp_path / "pkg" / "mykernels_rms_norm" / "__init__.py").read_text()
    assert "register_autograd" in text and "mykernels::rms_norm_backward" in text and "forward-only" not in text
    run = subprocess.run([python, "-c", BACKWARD_CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=env)
    assert "EXPORT OK" in run.stdout, run.stderr[-3000:]


@pytest.mark.gpu
def test_gpu_export_of_the_shipped_layernorm_kernel(tmp_path, venv):
    """opcheck, torch.compile(fullgraph=True) with inductor, and CUDA graph replay of the exported op."""
    python, env = _install(tmp_path, REPO / "kernels" / "layernorm_4d.py", "harness_kernels::layer_norm_4d", venv)
    run = subprocess.run([python, "-c", GPU_CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)
    assert "EXPORT OK" in run.stdout, run.stdout[-1000:] + run.stderr[-3000:]


def test_export_reads_what_a_shipped_kernel_computes(tmp_path):
    """kernels/layernorm_4d.py names its build by a hash and passes self.eps, declared `double eps` in C++:
    the package names its own build and types eps as a float."""
    done = export(str(REPO / "kernels" / "layernorm_4d.py"), "hk::ln", tmp_path / "o", tmp_path)
    text = (done.path / done.module / "__init__.py").read_text()
    assert "def ln(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:" in text
    assert "'name': 'hk_ln_" in text and "layernorm_4d_" not in text
    # the build arguments are Python literals, flags such as no_implicit_headers=True included
    build = next(node.value for node in ast.parse(text).body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_BUILD")
    assert ast.literal_eval(build)["no_implicit_headers"] is True
    done = export(str(REPO / "kernels" / "rmsnorm.py"), "hk::rms", tmp_path / "r", tmp_path)
    text = (done.path / done.module / "__init__.py").read_text()
    # float(self.eps) is a float; a module-level number forward passes travels with the package
    assert "eps: float, mode: int" in text and "\n_MODE = " in text


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
