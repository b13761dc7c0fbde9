"""`harness export` of a kernel, installed and timed as a user would meet it, beside the
harness's own figure for the same kernel.

    python bench/export.py [--kernel kernels/layernorm_4d.py] [--problem problems/layernorm_4d.py]
                           [--name harness_kernels::layer_norm_4d] [--device cuda]

Steps, each timed: export; `pip wheel` and `pip install` into a fresh venv; in that venv,
the import and the build at first use; `torch.library.opcheck`; torch.compile(fullgraph=True)
and (GPU) CUDA-graph replay against eager; the op's median by triton.testing.do_bench (GPU,
L2 flushed) or by perf_counter (CPU), on the problem's inputs. Then `harness eval` of the
same kernel file, whose candidate median should agree with the op's.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions, HarnessError, evaluate_batch, speedup_text  # noqa: E402
from harness.export.package import export, fresh_venv  # noqa: E402

# Runs in the venv, where only the installed package (and torch) is importable.
MEASURE = '''
import importlib, importlib.util, json, statistics, sys, time
import torch
module, op, problem_path, device = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("problem", problem_path)
problem = importlib.util.module_from_spec(spec); spec.loader.exec_module(problem)
out = {}
t = time.perf_counter(); m = importlib.import_module(module); out["import_s"] = time.perf_counter() - t
torch.manual_seed(0)
reference = problem.Model(*problem.get_init_inputs()).to(device)
model = m.ModelNew(*problem.get_init_inputs()).to(device)
model.load_state_dict(reference.state_dict(), strict=False)
x = [a.to(device) if torch.is_tensor(a) else a for a in problem.get_inputs()]
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
t = time.perf_counter()
with torch.no_grad():
    y = model(*x)
sync(); out["first_call_s"] = time.perf_counter() - t  # the load_inline build, or its cache
from torch.utils._python_dispatch import TorchDispatchMode


class Record(TorchDispatchMode):
    """Notes the op's call as ModelNew makes it, for opcheck's arguments."""
    calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name().startswith(op):
            # detached: opcheck also tries autograd, which an exported op (forward only) does not carry
            self.calls.append((func, [a.detach() if torch.is_tensor(a) else a for a in args]))
        return func(*args, **(kwargs or {}))


with torch.no_grad(), Record():
    model(*x)
try:
    func, call_args = Record.calls[0]
    torch.library.opcheck(func, call_args)
    out["opcheck"] = "passed"
except Exception as exc:
    out["opcheck"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
with torch.no_grad():
    expected = reference(*x)
    out["max_abs_error"] = (y - expected).abs().max().item()
    out["compile_equal"] = torch.equal(torch.compile(model, fullgraph=True)(*x), y)
    if device == "cuda":
        static = [a.clone() if torch.is_tensor(a) else a for a in x]
        model(*static); sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = model(*static)
        fresh = [torch.randn_like(a) if torch.is_tensor(a) else a for a in x]
        for s, f in zip(static, fresh):
            if torch.is_tensor(s):
                s.copy_(f)
        graph.replay()
        out["graph_equal"] = torch.equal(captured, model(*fresh))
        from triton.testing import do_bench
        out["op_ms"] = do_bench(lambda: model(*x), return_mode="median")
        out["op_method"] = "triton.testing.do_bench median, L2 flushed"
    else:
        times = []
        for _ in range(50):
            t = time.perf_counter(); model(*x); times.append((time.perf_counter() - t) * 1e3)
        out["op_ms"] = statistics.median(times)
        out["op_method"] = "perf_counter median of 50, caches warm"
print("RESULT " + json.dumps(out))
'''


def timed(what, *args, **kwargs) -> float:
    started = time.perf_counter()
    done = subprocess.run(*args, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"bench/export.py: {what} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", type=Path, default=REPO / "kernels" / "layernorm_4d.py")
    parser.add_argument("--problem", type=Path, default=REPO / "problems" / "layernorm_4d.py")
    parser.add_argument("--name", default="harness_kernels::layer_norm_4d")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--cache-dir", type=Path, default=None, help="the harness eval's build cache")
    args = parser.parse_args()
    console = Console()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        try:
            done = export(str(args.kernel), args.name, tmp / "pkg", tmp)
        except HarnessError as exc:
            sys.exit(f"bench/export.py: {exc}")
        rows.append(("export", f"{time.perf_counter() - started:.2f} s"))
        python = str(fresh_venv(tmp / "venv"))
        wheel = timed("pip wheel", [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                    "-w", str(tmp / "wheels"), str(done.path)])
        install = timed("pip install", [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                                        *map(str, (tmp / "wheels").glob("*.whl"))])
        rows.append(("pip wheel + pip install", f"{wheel:.1f} s + {install:.1f} s"))
        # ninja (the build) is found beside the python that has torch, as in a user's activated venv
        path = f"{Path(python).parent}:{Path(sys.executable).parent}:/usr/bin:/bin:/usr/local/bin"
        env = {"PATH": path, "HOME": str(tmp), "TORCH_EXTENSIONS_DIR": str(tmp / "ext")}
        with console.status("in the venv: first use (the build), opcheck, torch.compile, timing"):
            run = subprocess.run([python, "-c", MEASURE, done.module, args.name, str(args.problem.resolve()),
                                  args.device], capture_output=True, text=True, env=env, cwd=tmp, timeout=1800)
        line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"bench/export.py: the installed package failed in its venv:\n{run.stderr[-3000:]}")
        got = json.loads(line[len("RESULT "):])
    rows += [("import", f"{got['import_s']:.2f} s"), ("first call (build at first use)", f"{got['first_call_s']:.1f} s"),
             ("opcheck", got["opcheck"]), ("max abs error against Model", f"{got['max_abs_error']:.2e}"),
             ("torch.compile(fullgraph=True) equals eager", str(got["compile_equal"]))]
    if "graph_equal" in got:
        rows.append(("CUDA graph replay on new inputs equals eager", str(got["graph_equal"])))
    rows.append((f"the op, {got['op_method']}", f"{got['op_ms']:.4f} ms"))
    with console.status("harness eval of the same kernel file"):
        options = EvalOptions(device=args.device, cache_dir=args.cache_dir)
        [result] = evaluate_batch(args.problem, [args.kernel], options)
    if "candidate" in result.timings:
        ours = result.timings["candidate"].median
        rows.append(("harness eval: candidate median", f"{ours:.4f} ms ({result.verdict.value}, "
                     f"{speedup_text(result.speedup, result.speedup_interval)} over eager)"))
        rows.append(("op / harness", f"{got['op_ms'] / ours:.4f}"))
    else:
        rows.append(("harness eval", f"{result.verdict.value}: {result.explanation[:200]}"))
    table = Table(title=f"{args.kernel.name} exported as {args.name} ({args.device})")
    table.add_column("step")
    table.add_column("result")
    for row in rows:
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
