"""`harness export`: a candidate's kernel as a small installable package that registers it
as a torch.library custom op, with a fake implementation so torch.compile traces it.

The candidate file is read statically (ast), never run here: its load_inline call's
arguments must be literals (or module-level string constants), and ModelNew.forward must
return one call of the extension on tensors and plain constants, or (a training kernel) one
`Function.apply(...)` of a module-level torch.autograd.Function whose forward and backward call
the extension: then the backward is registered too (register_autograd), as an op of its own.
"""
from __future__ import annotations

import ast
import hashlib
import json
import pprint
import re
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import HarnessError
from ..results import EvalResult, speedup_text
from ..runs.history import load
from ..runs.store import StoreError

_OP_NAME = re.compile(r"^([A-Za-z_]\w*)::([A-Za-z_]\w*)$")


def fresh_venv(path: Path) -> Path:
    """A venv to try an exported package in: its own installs come first, and it also sees this
    python's packages (torch), even when this python is itself a venv, which --system-site-packages
    alone would not reach. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(path)], check=True, timeout=120)
    own = next(path.glob("lib/python*/site-packages"))
    (own / "_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return path / "bin" / "python"


class ExportError(HarnessError):
    """A candidate that cannot be exported; the message says why."""


@dataclass
class Exported:
    path: Path
    module: str
    op: str


def export(target: str, name: str, out: Optional[Path], runs_dir: Path) -> Exported:
    """Write the package for a candidate file, or for a run's best candidate (with its figures)."""
    match = _OP_NAME.match(name)
    if not match:
        raise ExportError(f"--name must be lib::op (letters, digits and _), such as mykernels::layer_norm; "
                          f"got `{name}`.")
    lib, op = match.groups()
    figures = None
    if Path(target).suffix == ".py":
        candidate = Path(target)
        if not candidate.is_file():
            raise ExportError(f"Candidate file {candidate} does not exist.")
    else:
        store, record = load(target, runs_dir)
        if record.best is None:
            raise ExportError(f"Run {store.id} has no correct candidate to export.")
        candidate = store.path / record.best.candidate
        try:
            figures = (store.id, store.round_dir(record.best.round, record.best.sample) / "eval.json",
                       store.load_round(record.best.round).samples[record.best.sample].eval)
        except (StoreError, IndexError) as exc:
            raise ExportError(f"The best round of {store.id} cannot be read: {exc}") from None
    source = candidate.read_text()
    kernel = _parse(source, candidate)
    module = f"{lib}_{op}"
    root = Path(out or module)
    package = root / module
    package.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{module.replace("_", "-")}"\nversion = "0.1.0"\ndependencies = ["torch"]\n\n'
        f'[tool.setuptools]\npackages = ["{module}"]\n')
    (package / "__init__.py").write_text(_module_text(kernel, lib, op, candidate))
    (root / "README.md").write_text(_readme(module, lib, op, candidate, figures,
                                            backward=kernel.autograd is not None))
    return Exported(root, module, name)


@dataclass
class _Kernel:
    ext: str  # the name the candidate binds its extension to
    build: dict  # load_inline's keyword arguments, literals
    function: str  # the extension function forward calls
    args: list[tuple[str, str]]  # (name, schema type) of the op's arguments
    model_new: str  # ModelNew's source
    numbers: dict  # module-level numbers that ModelNew.forward passes to the call
    autograd: Optional[tuple[str, str]] = None  # the torch.autograd.Function forward applies: name, source


def _parse(source: str, path: Path) -> _Kernel:
    def refuse(why: str) -> ExportError:
        return ExportError(f"Candidate {path} cannot be exported: {why}.")

    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise refuse(f"it has a syntax error at line {exc.lineno}") from None
    constants: dict = {}
    builds = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) == "load_inline":
                builds.append((node.targets[0].id, value))
                continue
            try:
                constants[node.targets[0].id] = _static_value(value, constants)
            except (KeyError, ValueError, TypeError):
                pass
    if len(builds) != 1:
        raise refuse(f"it has {len(builds)} module-level `name = load_inline(...)` assignments where the export "
                     "needs exactly one, found without running the file")
    ext, call = builds[0]
    if call.args:
        raise refuse("its load_inline call passes positional arguments; the export reads keyword arguments only")
    build = {}
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg == "name":
            continue  # the package names its extension itself, after its own sources (_module_text)
        try:
            build[keyword.arg] = _static_value(value, constants)
        except (KeyError, ValueError):
            raise refuse(f"load_inline's {keyword.arg}= is not a literal nor a module-level constant "
                         f"(`{ast.unparse(value)}`)") from None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = model and next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if forward is None:
        raise refuse("it defines no ModelNew class with a forward method")
    params = [a.arg for a in forward.args.args[1:]]
    body = [s for s in forward.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    ret = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
    functions = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)
                 and any(ast.unparse(b).endswith("Function") for b in n.bases)}
    called = ret.func.value.id if (isinstance(ret, ast.Call) and isinstance(ret.func, ast.Attribute)
                                   and isinstance(ret.func.value, ast.Name) and not ret.keywords) else None
    autograd = None
    if called in functions and ret.func.attr == "apply":
        autograd = (called, ast.get_source_segment(source, functions[called]))
    elif called != ext:
        raise refuse(f"ModelNew.forward must keep its work in one call, `return {ext}.<function>(...)` on tensors "
                     "(its arguments or its own parameters) and constants, or `return <Function>.apply(...)` of a "
                     "torch.autograd.Function defined in the file; it does other work too, which the op would not "
                     "carry")
    # a Function's arguments have no C++ declaration: numbers on self are read through float(), int()
    declared = None if autograd else _declared_types(build, ret.func.attr)
    args = []
    numbers = {}  # module-level numbers forward passes, written into the package beside ModelNew
    for i, arg in enumerate(ret.args):
        if isinstance(arg, ast.Name) and arg.id in params:
            args.append((arg.id, "torch.Tensor"))
        elif (isinstance(arg, ast.Call) and getattr(arg.func, "id", None) in ("float", "int", "bool")
              and len(arg.args) == 1 and _on_self(arg.args[0])):
            # float(self.eps): a number kept on the module, converted by the call
            args.append((_attr_name(arg.args[0]), arg.func.id))
        elif _on_self(arg):
            # a parameter, or a number kept on the module (self.eps): the C++ declaration tells which
            args.append((_attr_name(arg), declared[i] if declared and i < len(declared) else "torch.Tensor"))
        elif isinstance(arg, ast.Constant) and type(arg.value) in (int, float, bool):
            args.append((f"arg{i}", type(arg.value).__name__))
        elif isinstance(arg, ast.Name) and type(constants.get(arg.id)) in (int, float, bool):
            args.append((arg.id.strip("_").lower() or f"arg{i}", type(constants[arg.id]).__name__))
            numbers[arg.id] = constants[arg.id]
        else:
            raise refuse(f"argument {i + 1} of its {ext}.{ret.func.attr}(...) call, `{ast.unparse(arg)}`, is neither "
                         "a tensor (a forward argument, a self attribute) nor a number")
    return _Kernel(ext, build, ret.func.attr, args, ast.get_source_segment(source, model), numbers, autograd)


def _static_value(node: ast.expr, constants: dict):
    """A literal, a module-level constant, or what + , lists and plain f-strings make of them
    (`[_CPP_SRC]`, `_CONFIG + r"..."`, `f"-DMODE={_MODE}"`)."""
    if isinstance(node, ast.Name):
        return constants[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_static_value(item, constants) for item in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _static_value(node.left, constants) + _static_value(node.right, constants)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                if part.conversion != -1 or part.format_spec is not None:
                    raise ValueError("a formatted f-string field")
                part = part.value
            parts.append(str(_static_value(part, constants)))
        return "".join(parts)
    return ast.literal_eval(node)


def _on_self(node: ast.expr) -> bool:
    """self.x or self.linear.weight."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def _attr_name(node: ast.expr) -> str:
    """The op argument's name for self.eps or self.linear.weight: eps, linear_weight."""
    return ast.unparse(node).removeprefix("self.").replace(".", "_")


_CPP_TYPES = {"Tensor": "torch.Tensor", "double": "float", "float": "float", "int64_t": "int", "int": "int",
              "long": "int", "bool": "bool"}


def _declared_types(build: dict, function: str) -> Optional[list[str]]:
    """The op's argument types from the function's C++ declaration in cpp_sources, if it has one
    that reads plainly (`torch::Tensor f(torch::Tensor x, double eps)`)."""
    sources = build.get("cpp_sources", "")
    text = "\n".join(sources) if isinstance(sources, list) else str(sources)
    found = re.search(rf"\b{re.escape(function)}\s*\(([^()]*)\)\s*[{{;]", text)
    if not found:
        return None
    types = []
    for param in filter(None, (p.strip() for p in found.group(1).split(","))):
        words = re.findall(r"[A-Za-z_]\w*", param.split("=")[0])[:-1]  # the type's words, without the name
        kind = next((_CPP_TYPES[w] for w in reversed(words) if w in _CPP_TYPES), None)
        if kind is None:
            return None
        types.append(kind)
    return types


def _module_text(kernel: _Kernel, lib: str, op: str, candidate: Path) -> str:
    signature = ", ".join(f"{name}: {kind}" for name, kind in kernel.args)
    names = ", ".join(name for name, _ in kernel.args)
    first = next(name for name, kind in kernel.args if kind == "torch.Tensor")
    # named after its sources and flags, so an edited kernel never loads an older build
    numbers = "".join(f"{name} = {value!r}\n" for name, value in kernel.numbers.items()) + "\n\n" * bool(kernel.numbers)
    digest = hashlib.sha256(json.dumps(kernel.build, sort_keys=True).encode()).hexdigest()[:12]
    # _BUILD is written as Python literals (True, not JSON's true): the package must import
    ops = _autograd_ops(kernel, lib, op, signature, names, first) if kernel.autograd else f'''
@torch.library.custom_op("{lib}::{op}", mutates_args=())
def {op}({signature}) -> torch.Tensor:
    return _extension().{kernel.function}({names})


@{op}.register_fake
def _({names}):
    # the kernel's output is shaped like its first tensor argument
    return torch.empty_like({first})


def _no_backward(ctx, grad):
    raise RuntimeError({_forward_only(lib, op)!r})


# a backward through the op, eager or traced by torch.compile, meets one clear error
{op}.register_autograd(_no_backward)


class {kernel.ext}:
    """What the candidate's ModelNew calls its extension: here, the op."""

    {kernel.function} = staticmethod({op})
'''
    return f'''"""{lib}::{op}, exported by `harness export` from {candidate.name}.

The extension builds with torch.utils.cpp_extension.load_inline at first use; the op is a
torch.library custom op with a fake implementation, so torch.compile(fullgraph=True) traces it.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

_BUILD = {pprint.pformat({"name": f"{lib}_{op}_{digest}", **kernel.build}, sort_dicts=False, width=120)}
_built = None


def _extension():
    global _built
    if _built is None:
        _built = load_inline(**_BUILD)
    return _built

{ops}

{numbers}{kernel.model_new}
'''


def _forward_only(lib: str, op: str) -> str:
    """The error a backward through a forward-only op raises, and how to get an op with a backward."""
    return (f"{lib}::{op} is forward-only: it was exported from a candidate with no backward, so no gradient "
            f"flows through it. Call it under torch.no_grad() or on tensors that need no gradient; for training, "
            f"run the problem with `harness run --backward` and `harness export` that candidate, whose backward "
            f"is registered too.")


def _autograd_ops(kernel: _Kernel, lib: str, op: str, signature: str, names: str, first: str) -> str:
    """The candidate's torch.autograd.Function as two ops, forward and backward, joined by register_autograd.
    The backward op runs the Function's forward again to rebuild what it saved (an op returns tensors
    only, so the saved ones do not travel from the forward op): it costs one forward more."""
    name, source = kernel.autograd
    impl = f"_{name}"
    source = source.replace(f"class {name}(", f"class {impl}(", 1)
    return f'''
class _Extension:
    """The candidate's extension, built at first use."""

    def __getattr__(self, name):
        return getattr(_extension(), name)


{kernel.ext} = _Extension()


{source}


class _Saved:
    """Autograd's ctx, for calling the Function's forward and backward directly."""

    def __init__(self, count):
        self.needs_input_grad = (True,) * count
        self.saved_tensors = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        pass


@torch.library.custom_op("{lib}::{op}", mutates_args=())
def {op}({signature}) -> torch.Tensor:
    return {impl}.forward(_Saved({len(kernel.args)}), {names})


@{op}.register_fake
def _({names}):
    # the kernel's output is shaped like its first tensor argument
    return torch.empty_like({first})


{_backward_op(lib, op, impl, signature, names, len(kernel.args))}


class {name}:
    """What the candidate's ModelNew applies: here, the op, whose backward is registered."""

    apply = staticmethod({op})
'''


def _backward_op(lib: str, op: str, impl: str, signature: str, names: str, count: int) -> str:
    """The backward op, `impl`'s (the Function's) forward run again and then its backward, and what
    register_autograd joins it to the forward op with."""
    tensors = f"[t for t in ({names},) if isinstance(t, torch.Tensor)]"
    return f'''@torch.library.custom_op("{lib}::{op}_backward", mutates_args=())
def {op}_backward(grad: torch.Tensor, {signature}) -> list[torch.Tensor]:
    """The gradient of each tensor argument (zeros where the Function gives none)."""
    ctx = _Saved({count})
    {impl}.forward(ctx, {names})
    grads = {impl}.backward(ctx, grad)
    return [g if g is not None else torch.zeros_like(t) for g, t in zip(grads, ({names},))
            if isinstance(t, torch.Tensor)]


@{op}_backward.register_fake
def _(grad, {names}):
    return [torch.empty_like(t) for t in {tensors}]


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)])
    ctx.plain = [None if isinstance(a, torch.Tensor) else a for a in inputs]


def _backward(ctx, grad):
    saved = iter(ctx.saved_tensors)
    grads = iter({op}_backward(grad, *[next(saved) if p is None else p for p in ctx.plain]))
    return tuple(next(grads) if p is None else None for p in ctx.plain)


{op}.register_autograd(_backward, setup_context=_setup_context)'''


def _readme(module: str, lib: str, op: str, candidate: Path, figures, backward: bool) -> str:
    lines = [f"# {module}", "", f"`torch.ops.{lib}.{op}`, exported by `harness export` from `{candidate}`.", "",
             "```python", f"import {module}", f"y = torch.ops.{lib}.{op}(...)  # or {module}.ModelNew(...)", "```", "",
             "The C++/CUDA source builds with `load_inline` at first use (the candidate's own sources and flags). "
             "The fake implementation assumes the output is shaped like the first tensor argument; "
             "`torch.library.opcheck` checks that.", "",
             f"Its backward is registered too, as `{lib}::{op}_backward`: gradients flow through it, eagerly and "
             f"under torch.compile." if backward else
             f"**Forward-only.** {_forward_only(lib, op)} A backward through it, eager or under torch.compile, "
             "raises that as a RuntimeError.", "", "## Measured"]
    if figures is None:
        lines.append("No figures: exported from a loose file, not a run. `harness replay` measures it.")
    else:
        run, path, result = figures
        lines += _figures(result) + ["", f"From run `{run}`, `{path}`."]
    return "\n".join(lines) + "\n"


def _figures(result: EvalResult) -> list[str]:
    env = result.environment
    lines = [f"- speedup: {speedup_text(result.speedup, result.speedup_interval)}"]
    lines += [f"- {name}: {t.median:.4g} ms median over {t.n} samples" for name, t in result.timings.items()]
    if env:
        lines.append(f"- device: {env.device_name} ({env.device}), torch {env.torch}")
    if result.shapes:
        lines.append(f"- other shapes: {sum(bool(s.passed) for s in result.shapes)} of {len(result.shapes)} passed")
    if result.not_capturable:
        lines.append(f"- not capturable in a CUDA graph: {result.not_capturable}")
    return lines
