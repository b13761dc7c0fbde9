"""The static check's rules: what it looks for in a candidate's source, in one pass over the parsed
Python and the CUDA/C++ text its strings carry (`Scan`), each hit a `Finding`. static.py turns them
into the report and the policy's verdict.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator, Optional


@dataclass
class Finding:
    code: str
    message: str
    line: int


# op family: (names in the reference that reveal it, names that implement it in torch / ATen)
FAMILIES: dict[str, tuple[set[str], set[str]]] = {
    "layer_norm": ({"LayerNorm", "layer_norm"}, {"LayerNorm", "layer_norm", "native_layer_norm"}),
    "rms_norm": ({"RMSNorm", "rms_norm"}, {"RMSNorm", "rms_norm", "_fused_rms_norm"}),
    "group_norm": ({"GroupNorm", "group_norm"}, {"GroupNorm", "group_norm", "native_group_norm"}),
    "batch_norm": ({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "batch_norm"},
                   {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "batch_norm", "native_batch_norm",
                    "_native_batch_norm_legit_no_training"}),
    "instance_norm": ({"InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "instance_norm"},
                      {"InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "instance_norm"}),
    "softmax": ({"Softmax", "softmax", "LogSoftmax", "log_softmax"},
                {"Softmax", "softmax", "_softmax", "LogSoftmax", "log_softmax", "_log_softmax"}),
    "gemm": ({"Linear", "linear", "matmul", "mm", "bmm", "addmm", "einsum", "@"},
             {"Linear", "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addmv", "mv", "einsum",
              "tensordot", "_scaled_mm", "@"}),
    "conv": ({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
              "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"},
             {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
              "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose"}),
    "attention": ({"MultiheadAttention", "scaled_dot_product_attention"},
                  {"MultiheadAttention", "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                   "_scaled_dot_product_efficient_attention"}),
    "gelu": ({"GELU", "gelu"}, {"GELU", "gelu"}),
    "relu": ({"ReLU", "relu"}, {"ReLU", "relu", "relu_"}),
    "silu": ({"SiLU", "silu"}, {"SiLU", "silu"}),
    "sigmoid": ({"Sigmoid", "sigmoid"}, {"Sigmoid", "sigmoid"}),
    "tanh": ({"Tanh", "tanh"}, {"Tanh", "tanh"}),
}

# Implementing names that are also Tensor methods, so `x.softmax(...)` counts.
_TENSOR_METHODS = {"softmax", "log_softmax", "matmul", "mm", "bmm", "addmm", "baddbmm", "addmv", "mv",
                   "relu", "relu_", "sigmoid", "tanh"}

# Library calls in CUDA/C++ text that stand for a family's op.
_LIBRARY_TEXT = {"gemm": r"\bcublas\w*|\bat::cuda::blas::\w+", "conv": r"\bcudnn\w*"}

_COMPILERS = ("torch.compile", "torch._dynamo", "torch._inductor", "torch.jit.script", "torch.jit.trace")
_KERNEL_NAMES = ("torch.utils.cpp_extension.", "triton.jit", "triton.autotune", "cupy.RawKernel",
                 "cupy.RawModule", "numba.cuda.jit", "torch.cuda.jiterator.")
_KERNEL_TEXT = re.compile(r"__global__|<<<|PYBIND11_MODULE|TORCH_LIBRARY")
_HARNESS_MODULES = {"harness", "gc", "inspect", "ctypes", "socket", "problem"}
_HARNESS_NAMES = {
    "sys._getframe": "its callers' stack frames", "sys._current_frames": "other threads' stack frames",
    "sys.modules": "modules loaded by the harness", "sys.argv": "the worker's command line",
    "sys.settrace": "a trace hook", "sys.setprofile": "a profile hook", "threading.settrace": "a trace hook",
    "os.dup": "the worker's file descriptors", "os.dup2": "the worker's file descriptors",
    "os.write": "the worker's file descriptors", "os.fdopen": "the worker's file descriptors",
    "torch.initial_seed": "the seed the harness drew inputs with",
    "torch.random.initial_seed": "the seed the harness drew inputs with",
    "torch.cuda.initial_seed": "the seed the harness drew inputs with",
    "torch.get_rng_state": "the harness's random state",
}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "__globals__", "gi_frame", "tb_frame"}
_EXITS = ("os._exit", "os.abort", "os.kill", "os.killpg", "sys.exit", "signal.")
_BACKGROUND_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "asyncio"}
_STREAMS = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.StreamContext")
_STREAM_TEXT = re.compile(r"\bcudaStreamCreate\w*|\bcudaStreamNonBlocking\b|\bgetStreamFromPool\b")
_PERSISTING_TEXT = re.compile(
    r"\b\w*(?:accessPolicyWindow|AccessPolicyWindow|PersistingL2Cache|AccessPropertyPersisting)\w*")
_GRAPHS = ("torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.make_graphed_callables")
_GRAPH_TEXT = re.compile(r"\bcudaGraph\w*|\bcudaStreamBeginCapture\w*")
_LOW_PRECISION = ("torch.float16", "torch.half", "torch.bfloat16", "torch.autocast", "torch.amp",
                  "torch.cuda.amp", "torch.set_float32_matmul_precision")
_LOW_PRECISION_TEXT = re.compile(r"\b__half2?\b|\bhalf2\b|\b__nv_bfloat16\w*|\bcuda_fp16\.h|\bcuda_bf16\.h|"
                                 r"\b__float2half\w*|\bat::k(?:Half|BFloat16)\b|\bc10::(?:Half|BFloat16)\b|"
                                 r"\btf32\b")
_LOW_PRECISION_ATTRS = {"half", "bfloat16", "allow_tf32", "fp32_precision",
                        "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"}
_ATEN_OVERRIDE_TEXT = re.compile(r"TORCH_LIBRARY_IMPL\s*\(\s*aten\b")


class Scan:
    """One pass over a parsed candidate; `findings` yields what it saw."""

    def __init__(self, tree: ast.Module, families: list[str], low_precision_is_new: bool):
        self.tree = tree
        self.families = families
        self.low_precision_is_new = low_precision_is_new
        self.parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        self.aliases = self._aliases()
        self.extensions = self._extension_names()
        self.implementing = {name: family for family in families for name in FAMILIES[family][1]}

    # -- names ----------------------------------------------------------------

    def _aliases(self) -> dict[str, str]:
        """Local names bound to modules or their members: imports, and modules
        fetched through sys.modules or importlib."""
        aliases: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                module = self._fetched_module(node.value, aliases)
                if module:
                    aliases[node.targets[0].id] = module
        return aliases

    def _fetched_module(self, node: ast.AST, aliases: dict[str, str]) -> Optional[str]:
        """The module name m in sys.modules["m"], sys.modules.get("m") or importlib.import_module("m")."""
        if isinstance(node, ast.Subscript) and _const_str(node.slice):
            if self.dotted(node.value, aliases) == "sys.modules":
                return _const_str(node.slice)
        elif isinstance(node, ast.Call) and node.args and _const_str(node.args[0]):
            if self.dotted(node.func, aliases) in ("sys.modules.get", "importlib.import_module"):
                return _const_str(node.args[0])
        return None

    def dotted(self, node: ast.AST, aliases: Optional[dict[str, str]] = None) -> Optional[str]:
        """The full dotted name an expression refers to, when its root is a module."""
        aliases = self.aliases if aliases is None else aliases
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value, aliases)
            return f"{base}.{node.attr}" if base else None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and _const_str(node.args[1])):
            base = self.dotted(node.args[0], aliases)
            return f"{base}.{_const_str(node.args[1])}" if base else None
        return self._fetched_module(node, aliases)

    def _extension_names(self) -> set[str]:
        """Names bound to a built extension (ext = load_inline(...)): their
        functions are the candidate's own, whatever they are called."""
        names = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if (self.dotted(node.value.func) or "").startswith("torch.utils.cpp_extension."):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    def _is_extension_call(self, node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in self.extensions)

    def _strings(self) -> Iterator[tuple[str, int]]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.value, node.lineno

    def _text_hits(self, pattern: re.Pattern) -> Iterator[tuple[str, int]]:
        for text, line in self._strings():
            for match in pattern.finditer(text):
                yield match.group(0), line + text.count("\n", 0, match.start())

    def _names(self) -> Iterator[tuple[str, ast.AST]]:
        """Every full dotted name the code refers to (the longest chain only)."""
        for node in ast.walk(self.tree):
            named = isinstance(node, (ast.Name, ast.Attribute)) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr")
            if named and not isinstance(self.parents.get(node), ast.Attribute):
                name = self.dotted(node)
                if name:
                    yield name, node

    # -- findings ---------------------------------------------------------------

    def findings(self) -> Iterator[Finding]:
        yield from self._reference_ops()
        yield from self._compilers()
        yield from self._fallbacks()
        yield from self._kernel()
        yield from self._harness_access()
        yield from self._monkeypatches()
        yield from self._tensor_subclasses()
        yield from self._named("process_exit", _EXITS, "can end the worker process ({name})")
        yield from self._background()
        yield from self._named("side_stream", _STREAMS, "runs work on a stream of its own ({name})")
        yield from self._text("side_stream", _STREAM_TEXT, "runs work on a stream of its own ({name})")
        yield from self._text("persisting_l2", _PERSISTING_TEXT, "pins data in the L2 cache ({name})")
        yield from self._named("cuda_graph", _GRAPHS, "replays CUDA graphs ({name})")
        yield from self._text("cuda_graph", _GRAPH_TEXT, "replays CUDA graphs ({name})")
        if self.low_precision_is_new:
            yield from self._lower_precision()
        yield from self._state_across_calls()

    def _named(self, code: str, prefixes: tuple[str, ...], message: str) -> Iterator[Finding]:
        for name, node in self._names():
            if name.startswith(prefixes):
                yield Finding(code, message.format(name=name), node.lineno)

    def _text(self, code: str, pattern: re.Pattern, message: str) -> Iterator[Finding]:
        for name, line in self._text_hits(pattern):  # the first hit says it; CUDA repeats names a lot
            yield Finding(code, message.format(name=name), line)
            return

    def _reference_ops(self) -> Iterator[Finding]:
        def found(what: str, family: str, line: int) -> Finding:
            return Finding("reference_op", f"calls the reference op itself: {what} (the reference's {family})", line)

        for name, node in self._names():
            leaf = name.split(".ops.aten.")[-1].split(".")[0] if ".ops.aten." in name else name.rsplit(".", 1)[-1]
            if name.startswith("torch.") and leaf in self.implementing:
                yield found(name, self.implementing[leaf], node.lineno)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and "@" in self.implementing:
                yield found("the @ operator", "gemm", node.lineno)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in _TENSOR_METHODS and node.func.attr in self.implementing
                  and self.dotted(node.func.value) is None and not self._is_extension_call(node)):
                yield found(f"the Tensor method .{node.func.attr}()", self.implementing[node.func.attr], node.lineno)
        for family in self.families:
            leaves = [n for n in FAMILIES[family][1] if n != "@"]
            patterns = [r"\b(?:at|torch)::(?:\w+::)*(?:" + "|".join(map(re.escape, leaves)) + r")\b"]
            methods = [n for n in leaves if n in _TENSOR_METHODS]
            if methods:
                patterns.append(r"\.\s*(?:" + "|".join(methods) + r")\s*\(")
            if family in _LIBRARY_TEXT:
                patterns.append(_LIBRARY_TEXT[family])
            for what, line in self._text_hits(re.compile("|".join(patterns))):
                yield found(what.strip(), family, line)

    def _compilers(self) -> Iterator[Finding]:
        for name, node in self._names():
            if name.startswith(_COMPILERS):
                yield Finding("torch_compile", f"hands the work to a compiler ({name}) instead of a kernel of its own",
                              node.lineno)

    def _calls_torch(self, nodes: list[ast.AST], prefix: str) -> bool:
        return any(isinstance(n, ast.Call) and (self.dotted(n.func) or "").startswith(prefix) for n in nodes)

    def _fallbacks(self) -> Iterator[Finding]:
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Try) and type(node).__name__ != "TryStar":
                continue
            tried = [n for stmt in node.body for n in ast.walk(stmt)]
            guards_kernel = (any(map(self._is_extension_call, tried))
                             or self._calls_torch(tried, "torch.utils.cpp_extension."))
            for handler in node.handlers:
                inside = [n for stmt in handler.body for n in ast.walk(stmt)]
                if any(isinstance(n, ast.Raise) for n in inside):
                    continue
                if self._calls_torch(inside, "torch."):
                    yield Finding("fallback", "falls back to torch when its try block fails", handler.lineno)
                elif guards_kernel:
                    yield Finding("fallback", "swallows a failure of its kernel (build or launch) instead of "
                                  "failing", handler.lineno)

    def _kernel(self) -> Iterator[Finding]:
        if any(name.startswith(_KERNEL_NAMES) for name, _ in self._names()):
            return
        if any(_KERNEL_TEXT.search(text) for text, _ in self._strings()):
            return
        yield Finding("no_kernel", "launches no kernel of its own: no load_inline extension, CUDA source or "
                      "Triton kernel", 1)

    def _imports(self) -> Iterator[tuple[str, int]]:
        """(module, line) for every absolute import in the candidate."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                yield from ((a.name, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                yield node.module, node.lineno

    def _harness_access(self) -> Iterator[Finding]:
        for module, line in self._imports():
            if module.split(".")[0] in _HARNESS_MODULES:
                yield Finding("harness_access", f"reaches into the harness's process: imports {module}", line)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS:
                yield Finding("harness_access", f"reaches into the harness's process: reads .{node.attr} of a "
                              "frame or function", node.lineno)
        for name, node in self._names():
            for prefix, what in _HARNESS_NAMES.items():
                if name == prefix or name.startswith(prefix + "."):
                    yield Finding("harness_access", f"reaches into the harness's process: {what} ({prefix})",
                                  node.lineno)
        for text, line in self._strings():
            if "/proc/self" in text or "/dev/fd" in text:
                yield Finding("harness_access", "reaches into the harness's process: its /proc or /dev/fd entries",
                              line)

    def _monkeypatches(self) -> Iterator[Finding]:
        for node in ast.walk(self.tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "setattr", "delattr") and node.args:
                owner = self.dotted(node.args[0])
                if owner:
                    attr = _const_str(node.args[1]) if len(node.args) > 1 else None
                    yield Finding("monkeypatch", f"replaces {owner}.{attr or '<attribute>'}, which the harness "
                                  "and the reference share", node.lineno)
            for target in (t for top in targets for t in _flat_targets(top)):
                if isinstance(target, ast.Attribute):
                    name = self.dotted(target)
                    if name:
                        yield Finding("monkeypatch", f"replaces {name}, which the harness and the reference share",
                                      target.lineno)
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    name = self.dotted(base) or ""
                    if name.endswith(("TorchFunctionMode", "TorchDispatchMode")):
                        yield Finding("monkeypatch", f"intercepts torch calls across the process with a mode "
                                      f"({node.name}, a {name.rsplit('.', 1)[-1]})", node.lineno)
        for name, node in self._names():
            if name.startswith("torch.library.") and name.rsplit(".", 1)[-1] in ("Library", "impl"):
                yield Finding("monkeypatch", f"registers op implementations for the whole process ({name})",
                              node.lineno)
        yield from self._text("monkeypatch", _ATEN_OVERRIDE_TEXT, "overrides ATen ops for the whole process ({name})")

    def _tensor_subclasses(self) -> Iterator[Finding]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef) and any(
                    (self.dotted(b) or "").startswith("torch.") and (self.dotted(b) or "").endswith("Tensor")
                    for b in node.bases):
                yield Finding("tensor_subclass", f"defines a Tensor subclass ({node.name})", node.lineno)
            elif isinstance(node, ast.FunctionDef) and node.name in ("__torch_function__", "__torch_dispatch__"):
                yield Finding("tensor_subclass", f"overrides {node.name}", node.lineno)
            elif isinstance(node, ast.Attribute) and node.attr in ("_make_subclass", "_make_wrapper_subclass"):
                yield Finding("tensor_subclass", f"builds a Tensor subclass ({node.attr})", node.lineno)

    def _background(self) -> Iterator[Finding]:
        for module, line in self._imports():
            if module.split(".")[0] in _BACKGROUND_MODULES:
                yield Finding("background_work", f"can run work in the background ({module})", line)
        yield from self._named("background_work", ("os.fork", "subprocess."), "can run work in the background ({name})")

    def _lower_precision(self) -> Iterator[Finding]:
        message = "computes in lower precision than the problem's dtypes ({name})"
        yield from self._named("lower_precision", _LOW_PRECISION, message)
        yield from self._text("lower_precision", _LOW_PRECISION_TEXT, message)
        for node in ast.walk(self.tree):  # x.half(), torch.backends...allow_tf32 = True
            if isinstance(node, ast.Attribute) and node.attr in _LOW_PRECISION_ATTRS and self.dotted(node) is None:
                yield Finding("lower_precision", message.format(name=f".{node.attr}"), node.lineno)
        for name, node in self._names():
            if name.rsplit(".", 1)[-1] in _LOW_PRECISION_ATTRS:
                yield Finding("lower_precision", message.format(name=name), node.lineno)

    def _state_across_calls(self) -> Iterator[Finding]:
        for cls in (n for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef)):
            for forward in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"):
                for node in ast.walk(forward):
                    targets = node.targets if isinstance(node, ast.Assign) else (
                        [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
                    for target in (t for top in targets for t in _flat_targets(top)):
                        owner = _self_attribute(target)
                        if owner:
                            yield Finding("state_across_calls", f"keeps state across calls in forward (self.{owner}): "
                                          "its behaviour can change between calls", target.lineno)


def _const_str(node: Optional[ast.AST]) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _flat_targets(target: ast.AST) -> Iterator[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flat_targets(element)
    else:
        yield target


def _self_attribute(target: ast.AST) -> Optional[str]:
    """The attribute of self that an assignment target writes: cache for self.cache, self.cache[k], self.cache.x."""
    node, attr = target, None
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            attr = node.attr
        node = node.value
    return attr if isinstance(node, ast.Name) and node.id == "self" and target is not node else None
