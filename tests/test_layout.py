"""The layers import only downward, no modules import each other in a circle, and proposer names are
compared only in loop/proposers/, where the kinds live.

    cli -> agent -> loop -> sweep -> export -> runs -> engine -> integrity -> leaves (results, profiles, tokens, stats,
    problem, device, errors, files, version, pages, torch_install, degenerate)

Inside engine/, its sub-packages (building/, processes/, checking/, timing/, profiling/, workers/) and
its top modules import one another without a circle either.

Every import counts: module-level, inside functions, and under TYPE_CHECKING.
"""
import ast
import subprocess
import sys
from pathlib import Path

import harness
from harness.loop.proposers.kinds import KINDS

PACKAGE = Path(harness.__file__).parent
LEAVES = ("results", "serial", "profiles", "tokens", "stats", "problem", "device", "errors", "files", "version", "pages",
          "torch_install", "degenerate")
LAYERS = ("integrity", "engine", "runs", "export", "sweep", "loop", "agent", "cli")  # lowest first


def rank(module: str) -> int:
    """0 for a leaf, then one per layer; the package itself (the public API) and __main__ sit on top."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return len(LAYERS) + 1
    if parts[1] in LEAVES:
        return 0
    return LAYERS.index(parts[1]) + 1


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(module: str, source: str, is_package: bool, known: set[str]) -> list[tuple[str, int]]:
    """The harness modules `source` imports, each with its line."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from harness.engine.processes import channel` imports the module harness.engine.processes.channel
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        found += [(name, node.lineno) for name in names if name.split(".")[0] == "harness"]
    return found


def sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in sorted(PACKAGE.rglob("*.py"))}


def violations(modules: dict[str, tuple[str, bool]]) -> list[str]:
    """Upward imports, and circles between modules."""
    known = set(modules)
    graph: dict[str, set[str]] = {}
    problems = []
    for module, (source, is_package) in modules.items():
        for target, line in imports(module, source, is_package, known):
            if target not in known:
                problems.append(f"{module}:{line} imports {target}, which does not exist")
                continue
            if rank(target) > rank(module):
                problems.append(f"{module}:{line} imports {target} from a higher layer")
            if target != module:
                graph.setdefault(module, set()).add(target)
    return problems + circles(graph)


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle of the graph: a node that reaches itself."""
    problems = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                problems.append("circle: " + " -> ".join(path[path.index(nxt):] + [node, nxt]))
            elif nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return problems


def name_comparisons(modules: dict[str, tuple[str, bool]]) -> list[str]:
    """Proposer names compared (==, !=, in, and their negations) outside loop/proposers/, where the
    kinds live: elsewhere a kind is looked up in the registry and asked, never told apart by its name."""
    names = {kind.name for kind in KINDS}
    found = []
    for module, (source, _) in modules.items():
        if module.startswith("harness.loop.proposers"):
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            operands += [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set)) for e in o.elts]
            said = {o.value for o in operands if isinstance(o, ast.Constant)} & names
            found += [f"{module}:{node.lineno} compares the proposer name `{name}`" for name in sorted(said)]
    return found


def room(module: str) -> str:
    """Inside engine/, a sub-package is one room with all it holds; a top module is a room of its own."""
    return ".".join(module.split(".")[:3])


def test_the_engines_rooms_import_one_another_without_a_circle():
    """A circle between rooms is a sub-package that stands both above and below another room."""
    modules = sources()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in modules.items():
        if module.startswith("harness.engine."):
            for target, _ in imports(module, source, is_package, known):
                if target.startswith("harness.engine.") and room(target) != room(module):
                    graph.setdefault(room(module), set()).add(room(target))
    assert "harness.engine.processes" in graph["harness.engine.building"]
    assert circles(graph) == []


def test_every_module_belongs_to_a_layer():
    for module in sources():
        rank(module)  # raises ValueError for a folder that is no layer


def test_imports_run_only_downward_and_never_in_a_circle():
    assert violations(sources()) == []


def sneaked(added: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """The package's sources, code added at the end of the modules `added` names."""
    modules = sources()
    for module, code in added.items():
        source, is_package = modules[module]
        modules[module] = (source + code, is_package)
    return modules


def test_an_upward_import_inside_a_function_is_caught():
    modules = sneaked({"harness.engine.evaluate": "\n\ndef sneak():\n    from harness.cli import main\n"})
    assert any("harness.engine.evaluate" in v and "higher layer" in v for v in violations(modules))


def test_a_circle_is_caught():
    modules = sneaked({"harness.results": "\n\ndef sneak():\n    from .problem import Problem\n",
                       "harness.problem": "\nfrom .results import Verdict\n"})
    assert any(v.startswith("circle:") for v in violations(modules))


def test_proposer_kinds_are_asked_not_compared_by_name():
    assert name_comparisons(sources()) == []


def test_a_proposer_name_compared_is_caught():
    modules = sneaked({"harness.cli.display": "\n\ndef sneak(s):\n    return s.proposer in ('x', 'files')\n",
                       "harness.loop.loop": "\n\ndef sneak(s):\n    return 'openai' != s.proposer\n"})
    assert [v.split(":")[0] for v in name_comparisons(modules)] == ["harness.cli.display", "harness.loop.loop"]


def test_the_loop_never_imports_rich():
    for module, (source, _) in sources().items():
        if rank(module) <= LAYERS.index("loop") + 1:
            tree = ast.parse(source)
            names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
            assert not [n for n in names if n.split(".")[0] == "rich"], module


def test_import_harness_stays_cheap():
    code = ("import sys, harness; harness.Verdict; "
            "print(sorted(m for m in ('torch', 'rich', 'openai', 'jinja2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_tool_needs_neither_ray_nor_pytest():
    """`pip install -e .` is enough: no module imports ray (but the --ray backend and its actors) or pytest.
    (The MCP server needs its extra, `mcp`.)"""
    modules = sorted(m for m in sources() if not m.endswith(("ray_backend", "ray_actors", "agent.server", "__main__")))
    code = (f"import sys, importlib; [importlib.import_module(m) for m in {modules!r}]; "
            "print(sorted(m for m in ('ray', 'pytest') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]" and "harness.cli.main" in modules


def test_every_public_name_resolves():
    for name in harness.__all__:
        assert getattr(harness, name) is not None, name
