"""Problem files: KernelBench format, loaded and linted.

Loading here is static (it parses, it does not run the file), so the harness
process never executes problem code; the reference process does that and
reports dynamic problems (bad inputs) as a ProblemError too.
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .errors import HarnessError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")

# allclose tolerances by dtype when a problem sets none
DEFAULT_TOLERANCES = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


class ProblemError(HarnessError):
    """A problem file that cannot be used; the message is one paragraph for a person."""


@dataclass
class Problem:
    path: str
    name: str
    source: str
    sha256: str
    atol: Optional[float] = None
    rtol: Optional[float] = None
    # what Model draws random numbers with, as its source reads (dropout modules, torch.rand in
    # forward); the reference process also tries it (integrity/lint.draws_random)
    random_draws: list[str] = field(default_factory=list)
    backward: bool = False  # BACKWARD = True: evaluated forward and backward, as --backward does
    grad_atol: Optional[float] = None  # GRAD_ATOL, GRAD_RTOL: the gradients' tolerance; None: as the outputs'
    grad_rtol: Optional[float] = None

    def tolerances(self, dtype_name: str, gradients: bool = False) -> tuple[float, float]:
        atol, rtol = DEFAULT_TOLERANCES.get(dtype_name, (1e-4, 1e-4))
        atol, rtol = (self.atol if self.atol is not None else atol,
                      self.rtol if self.rtol is not None else rtol)
        if gradients:
            atol, rtol = (self.grad_atol if self.grad_atol is not None else atol,
                          self.grad_rtol if self.grad_rtol is not None else rtol)
        return atol, rtol

    def tolerance_table(self, atol: Optional[float] = None, rtol: Optional[float] = None,
                        gradients: bool = False) -> dict[str, list[float]]:
        """(atol, rtol) by dtype name, and "default" for any other: what the reference process gets.
        `atol`, `rtol` (--atol, --rtol) replace the problem's and the defaults for every dtype;
        `gradients`: the gradients' (GRAD_ATOL, GRAD_RTOL where the problem sets them)."""
        table = {dtype: list(self.tolerances(dtype, gradients)) for dtype in DEFAULT_TOLERANCES}
        table["default"] = list(self.tolerances("float32", gradients))
        for pair in table.values():
            pair[:] = [atol if atol is not None else pair[0], rtol if rtol is not None else pair[1]]
        return table


def tolerance(table: dict, dtype: str) -> tuple[float, float]:
    """(atol, rtol) for a dtype ("float16" or torch's "torch.float16") from a tolerance_table()."""
    atol, rtol = table.get(dtype.removeprefix("torch."), table["default"])
    return float(atol), float(rtol)


def widened(tol: tuple[float, float], allowance: Optional[list[float]],
            gradient: Optional[int]) -> tuple[float, float]:
    """An entry's (atol, rtol) under --backward: gradient number `gradient` (None: an output) has its
    atol plus its allowance, the reference's own rounding (workers/backward.rounding_allowance)."""
    if gradient is None or not allowance or gradient >= len(allowance):
        return tol
    return tol[0] + allowance[gradient], tol[1]


def _constant(tree: ast.Module, name: str, path: Path) -> Optional[float]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ProblemError(
                    f"Problem file {path}: {name} must be a non-negative number literal, "
                    f"found `{ast.unparse(node.value)}`.")
            return float(value)
    return None


def _flag(tree: ast.Module, name: str, path: Path) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool)):
                raise ProblemError(f"Problem file {path}: {name} must be True or False, "
                                   f"found `{ast.unparse(node.value)}`.")
            return node.value.value
    return False


# torch functions that draw from the generator, called in forward
RANDOM_CALLS = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli",
                "multinomial", "normal", "poisson", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                "feature_alpha_dropout", "bernoulli_", "uniform_", "normal_", "exponential_", "random_",
                "cauchy_", "log_normal_", "geometric_", "rrelu"}
# modules that draw in training mode
RANDOM_MODULES = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "RReLU"}


def _random_draws(tree: ast.Module) -> list[str]:
    """The random functions Model's forward calls and the dropout modules it builds."""
    found: list[str] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"):
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(method):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                # self.dropout(x) calls a submodule, found where it is built
                own = isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "self"
                if name in RANDOM_MODULES or (method.name == "forward" and name in RANDOM_CALLS and not own):
                    found += [name] if name not in found else []
    return found


def load_problem(path: str | Path) -> Problem:
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"Problem file {path} does not exist or is not a file.")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"Problem file {path} cannot be read: {exc}.") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(
            f"Problem file {path} has a syntax error at line {exc.lineno}: {exc.msg}. "
            "A problem must be a valid Python file in KernelBench format.") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [name for name in REQUIRED if name not in defined]
    if missing:
        raise ProblemError(
            f"Problem file {path} does not define {', '.join(missing)}. A problem in "
            "KernelBench format defines `class Model(nn.Module)`, `get_inputs()` returning "
            "the forward arguments and `get_init_inputs()` returning the constructor arguments.")
    return Problem(path=str(path.resolve()), name=path.stem, source=source,
                   sha256=hashlib.sha256(source.encode()).hexdigest(),
                   atol=_constant(tree, "ATOL", path), rtol=_constant(tree, "RTOL", path),
                   random_draws=_random_draws(tree), backward=_flag(tree, "BACKWARD", path),
                   grad_atol=_constant(tree, "GRAD_ATOL", path), grad_rtol=_constant(tree, "GRAD_RTOL", path))


# The functions whose module-level ints set a KernelBench problem's shape.
_SHAPE_READERS = ("get_inputs", "get_init_inputs")


def shape_names(source: str) -> list[str]:
    """The module-level ints (`batch_size = 16`) that get_inputs() or get_init_inputs() read,
    in the order the file assigns them."""
    tree = ast.parse(source)
    read = {node.id for fn in tree.body if isinstance(fn, ast.FunctionDef) and fn.name in _SHAPE_READERS
            for node in ast.walk(fn) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and type(node.value.value) is int and node.value.value > 0:
            names += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id in read and t.id not in names]
    return names


def derived_shapes(main: dict[str, int]) -> list[dict[str, int]]:
    """Other shapes from the main one: every int halved, then halved and made odd, then small (1 and 3).
    None is larger than the main shape, so each fits where the main one does. The odd shape is a
    halved one: odd sizes catch what the main shape's divisibility hid at any size, and a trial near
    the main size costs as much as the main shape's (a multi-GB input's check is mostly copies)."""
    halved = {k: max(1, n // 2) for k, n in main.items()}
    variants = [halved, {k: n - 1 if n % 2 == 0 and n > 1 else n for k, n in halved.items()},
                {k: 1 for k in main}, {k: min(3, n) for k, n in main.items()}]
    unique: list[dict[str, int]] = []
    for variant in variants:
        if variant != main and variant not in unique:
            unique.append(variant)
    return unique


# The shapes of an imported problem module, read and set in the processes that import it.

def declared_shapes(problem, function: str) -> Optional[list[dict]]:
    """The shapes the problem's `function`() declares (a list of dicts of its module-level
    values), or None where it defines no such function; anything else raises TypeError."""
    declared = getattr(problem, function, None)
    if not callable(declared):
        return None
    shapes = declared()
    form = (f"{function}() must return a list of dicts, each naming module-level values of the problem "
            "and the values to set them to (e.g. [{}, {\"batch_size\": 64}], {} being the main shape)")
    if not isinstance(shapes, (list, tuple)):
        raise TypeError(f"{form}; it returned a {type(shapes).__name__}: {shapes!r}"[:500])
    for shape in shapes:
        if not isinstance(shape, dict):
            raise TypeError(f"{form}; it holds {shape!r}, a {type(shape).__name__}"[:500])
        unknown = [name for name in shape if not (isinstance(name, str) and hasattr(problem, name))]
        if unknown:
            raise TypeError(f"{form}; {shape!r} names {', '.join(map(repr, unknown))}, which the problem does "
                            "not define at module level"[:500])
    return list(shapes)


def shape_variants(problem) -> list[dict]:
    """The shapes to check besides the main one: what the problem's get_shape_variants()
    declares, else ones derived from the module-level ints its input functions read."""
    declared = declared_shapes(problem, "get_shape_variants")
    if declared is not None:
        return declared
    source = Path(problem.__file__).read_text()
    return derived_shapes({name: getattr(problem, name) for name in shape_names(source)
                           if type(getattr(problem, name, None)) is int})


def benchmark_shapes(problem) -> list[dict]:
    """The shapes to time at, whose speedups' geometric mean is the result's: what the problem's
    get_benchmark_shapes() declares, else none (the main shape alone is timed)."""
    declared = declared_shapes(problem, "get_benchmark_shapes")
    if declared == []:
        raise TypeError("get_benchmark_shapes() returned no shape to time at; list {} for the main shape, "
                        "or leave the function out")
    return declared or []


class Shapes:
    """The problem module's values at the main shape, and a way to set another shape."""

    def __init__(self, problem):
        self.problem = problem
        self.main: dict[str, Any] = {}

    def set(self, values: dict) -> None:
        """Set `values` on the module ({} restores the main shape)."""
        for name, value in {**self.main, **values}.items():
            self.main.setdefault(name, getattr(self.problem, name))
            setattr(self.problem, name, value)
