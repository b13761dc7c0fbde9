"""Lean torch headers for a candidate's sources (load_inline's cuda.cu and main.cpp): their umbrella
includes (`<torch/extension.h>`, `<torch/types.h>`, `<ATen/ATen.h>`, ...) replaced by the per-operator
headers their code uses, as PyTorch builds its own operators. nvcc's front ends parse torch's headers twice and the host
compiler once more, so a `.cu` that includes `<torch/extension.h>` takes several times as long to
compile as the same code with `<ATen/core/Tensor.h>` and the few `<ATen/ops/NAME.h>` it calls.

A per-operator header stands in a lean source as its own declarations (declarations_of): the includes
every generated per-operator header shares (ATen/Context.h, DeviceGuard.h, TensorUtils.h, ...) cost
more to parse than the few inline wrappers it declares, which do not use them. The tensor's operators
(`x / n`, `a * b`: ATen/TensorOperators.h) stand in every lean source that uses torch, the same way:
no text says where code uses them.

Pure text in, text out: the caller gives the headers a prelude may hold as their declarations, by path
(`ops`: every ATen/ops/NAME.h and ATen/TensorOperators.h, read from torch's install by headers.py), and
builds the original where the lean source does not compile (headers.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

# What replaces every umbrella: the tensor class with its methods, TORCH_CHECK, options and dtypes; its
# operators, and the one operator they call.
CORE = "ATen/core/Tensor.h"
OPERATORS = "ATen/TensorOperators.h"
_CORE = (CORE, "ATen/ops/empty_like.h", OPERATORS)
# Defined first, as PyTorch builds itself: torch's headers include the operators they use, not ATen/Functions.h.
_PER_OPERATOR = "#ifndef AT_PER_OPERATOR_HEADERS\n#define AT_PER_OPERATOR_HEADERS\n#endif"
# Torch headers left in a source that include no per-operator header: beside them, a prelude may hold
# per-operator headers as their declarations without defining an inline function twice.
_INLINE_SAFE = re.compile(r"c10/|ATen/cuda/|ATen/core/|ATen/(Dispatch|Dispatch_v2|DeviceGuard|TensorUtils|Context|"
                          r"AccumulateType|OpMathType|ceil_div|Parallel)\.h")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]((?:torch|ATen|c10)/[^>"]+)[>"]', re.MULTILINE)
# What load_inline's bindings in main.cpp need of torch/extension.h: torch::wrap_pybind_function and, through
# torch/csrc/utils/pybind.h, every pybind11 header and type caster torch/extension.h brings.
BINDING = "torch/csrc/Exceptions.h"
# Includes that pull in every operator (or, for CUDAContext.h, cuBLAS, cuSPARSE and ATen's context).
_UMBRELLA = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](torch/(extension|torch|all|types)\.h|ATen/(ATen|Functions)\.h'
                       r'|ATen/cuda/CUDAContext\.h)[>"][^\n]*$', re.MULTILINE)
# What load_inline puts after its implicit torch header in a .cu (where not told otherwise: no_implicit_headers).
_IMPLICIT_CU = ("#include <cuda.h>", "#include <cuda_runtime.h>")
# Why a source stays as it is, already lean.
NO_UMBRELLA = "it includes no umbrella torch header"

# Code whose meaning needs torch's own headers: the source is built as written.
_PYBIND = re.compile(r"\bPYBIND11_\w+|\bpybind11::|\bpy::")
_BLOCKERS = (
    (re.compile(r"\bTORCH_LIBRARY\w*"), "it registers operators (TORCH_LIBRARY)"),
    (re.compile(r"\brequires_grad\b"), "it asks for requires_grad, where torch::'s factory functions differ "
                                        "from at::'s"),
    (re.compile(r"\btorch\s*::\s*tensor\b"), "it calls torch::tensor, whose dtype inference differs from at::tensor's"),
)
# torch:: namespaces of the C++ frontend and ATen's internals, which no per-operator header declares.
# (at::indexing's header includes ATen/Functions.h: lean would save nothing.)
_FOREIGN = frozenset({"nn", "autograd", "jit", "optim", "data", "serialize", "python", "utils", "native", "indexing"})

# Names (after torch::, at:: or c10::) that need a header of their own; None: ATen/core/Tensor.h declares them.
_SYMBOLS: dict[str, Optional[str]] = {
    **dict.fromkeys(("dtype", "device", "layout", "memory_format", "device_index", "pinned_memory", "toString",
                     "elementSize", "isFloatingType", "isComplexType", "isIntegralType", "isReducedFloatingType",
                     "typeMetaToScalarType", "scalarTypeToTypeMeta", "optional", "nullopt", "make_optional",
                     "str", "Dtype", "string_view", "complex"), None),
    "irange": "c10/util/irange.h",
    "ceil_div": "ATen/ceil_div.h",
    "device_of": "ATen/DeviceGuard.h", "DeviceGuard": "ATen/DeviceGuard.h", "OptionalDeviceGuard": "ATen/DeviceGuard.h",
    "acc_type": "ATen/AccumulateType.h", "acc_type_device": "ATen/AccumulateType.h",
    "opmath_type": "ATen/OpMathType.h",
    "TensorArg": "ATen/TensorUtils.h", "checkAllSameGPU": "ATen/TensorUtils.h", "checkContiguous": "ATen/TensorUtils.h",
    "checkDim": "ATen/TensorUtils.h", "checkSameType": "ATen/TensorUtils.h", "checkScalarType": "ATen/TensorUtils.h",
    "globalContext": "ATen/Context.h",
    "NoGradGuard": "ATen/core/grad_mode.h", "AutoGradMode": "ATen/core/grad_mode.h", "GradMode": "ATen/core/grad_mode.h",
    "parallel_for": "ATen/Parallel.h", "get_num_threads": "ATen/Parallel.h",
    "philox_cuda_state": "ATen/cuda/CUDAGeneratorImpl.h", "PhiloxCudaState": "ATen/cuda/PhiloxCudaState.h",
    "cuda::getCurrentCUDAStream": "c10/cuda/CUDAStream.h", "cuda::getDefaultCUDAStream": "c10/cuda/CUDAStream.h",
    "cuda::getStreamFromPool": "c10/cuda/CUDAStream.h", "cuda::getStreamFromExternal": "c10/cuda/CUDAStream.h",
    "cuda::setCurrentCUDAStream": "c10/cuda/CUDAStream.h", "cuda::CUDAStream": "c10/cuda/CUDAStream.h",
    "cuda::CUDAGuard": "c10/cuda/CUDAGuard.h", "cuda::OptionalCUDAGuard": "c10/cuda/CUDAGuard.h",
    "cuda::CUDAStreamGuard": "c10/cuda/CUDAGuard.h", "cuda::OptionalCUDAStreamGuard": "c10/cuda/CUDAGuard.h",
    "cuda::CUDAMultiStreamGuard": "c10/cuda/CUDAGuard.h",
    "cuda::device_count": "c10/cuda/CUDAFunctions.h", "cuda::current_device": "c10/cuda/CUDAFunctions.h",
    "cuda::set_device": "c10/cuda/CUDAFunctions.h", "cuda::device_synchronize": "c10/cuda/CUDAFunctions.h",
    "cuda::stream_synchronize": "c10/cuda/CUDAFunctions.h",
    "cuda::CUDACachingAllocator": "c10/cuda/CUDACachingAllocator.h",
    "cuda::CUDAEvent": "ATen/cuda/CUDAEvent.h",
    "cuda::detail": "ATen/cuda/detail/IndexUtils.cuh",
    "cuda::blas": "ATen/cuda/CUDABlas.h",
}
# Any other at::cuda:: name: the umbrella CUDA header it most likely came from.
_CUDA_UMBRELLA = "ATen/cuda/CUDAContext.h"
# Macros and the headers that define them, by their names' beginnings.
_MACROS = (
    ("AT_DISPATCH_V2", "ATen/Dispatch_v2.h"),
    ("AT_DISPATCH_", "ATen/Dispatch.h"),
    ("C10_CUDA_KERNEL_LAUNCH_CHECK", "c10/cuda/CUDAException.h"),
    ("C10_CUDA_CHECK", "c10/cuda/CUDAException.h"),
    ("AT_CUDA_CHECK", "ATen/cuda/Exceptions.h"),
    ("TORCH_CUDABLAS_CHECK", "ATen/cuda/Exceptions.h"),
)
# What torch/extension.h brought a source of the standard library, which code often uses unincluded.
_STANDARD = ("algorithm", "array", "cassert", "cfloat", "climits", "cmath", "cstddef", "cstdint", "cstdio", "cstdlib",
             "cstring", "functional", "iostream", "limits", "map", "memory", "numeric", "optional", "sstream",
             "stdexcept", "string", "tuple", "type_traits", "unordered_map", "utility", "vector")
# torch/types.h's own spellings beside at::'s, each defined where the code names it (nvcc warns of an
# unused constant outside a system header).
_TORCH_ALIASES = {
    "Dtype": "using Dtype = at::ScalarType;",
    **{name: f"constexpr auto {name} = at::{value};" for name, value in (
        ("kUInt8", "kByte"), ("kInt8", "kChar"), ("kInt16", "kShort"), ("kInt32", "kInt"), ("kInt64", "kLong"),
        ("kUInt16", "kUInt16"), ("kUInt32", "kUInt32"), ("kUInt64", "kUInt64"), ("kFloat16", "kHalf"),
        ("kFloat32", "kFloat"), ("kFloat64", "kDouble"), ("kU8", "kByte"), ("kU16", "kUInt16"), ("kU32", "kUInt32"),
        ("kU64", "kUInt64"), ("kI8", "kChar"), ("kI16", "kShort"), ("kI32", "kInt"), ("kI64", "kLong"),
        ("kF16", "kHalf"), ("kF32", "kFloat"), ("kF64", "kDouble"))},
}
# The line that stands where an umbrella include stood, so every other line keeps its number.
REPLACED = "// (lean build: {} replaced by the headers at the top)"

_QUALIFIED = re.compile(r"\b(torch|at|c10)\s*::\s*(\w+(?:\s*::\s*\w+)*)")
_CALL = re.compile(r"(?<![\w.>:])([a-z_]\w*)\s*\(")
_MACRO = re.compile(r"\b(AT_|C10_|TORCH_)\w+")
_STREAMS = re.compile(r"\b(cout|cerr|clog|ostream|ostringstream|stringstream)\b")
# What makes code need torch at all, beside qualified names and torch's macros.
_BARE_TORCH = re.compile(r"\b(Tensor|TensorOptions)\b|\busing\s+namespace\s+(torch|at|c10)\b")


@dataclass(frozen=True)
class LeanSource:
    """A source with lean headers: its `text` and the torch `headers` its prelude includes. Where it
    stays as written, `reason` says why and `text` is the source as it was."""

    text: str
    headers: tuple[str, ...] = ()
    reason: str = ""


def code_only(text: str, strings: bool = True) -> str:
    """The source with its comments (and, with `strings`, its string and character literals) blanked,
    newlines kept: what is left are the names the code uses, at their own offsets."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start: int, end: int) -> None:
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif c == '"' or (c == "'" and not (i and text[i - 1].isalnum())):  # 1'000: a digit separator
            end = i + 1
            while end < n and text[end] not in (c, "\n"):
                end += 2 if text[end] == "\\" else 1
            end += 1
        else:
            i += 1
            continue
        if strings or c == "/":
            blank(i, end)
        i = end
    return "".join(out)


def _header_of(root: str, path: list[str], ops: Mapping[str, str]) -> tuple[Optional[str], str]:
    """The header a name of namespace `root` needs (None: the core header has it), or why no header can
    be chosen."""
    name = f"{root}::" + "::".join(path)
    if path[0] in _FOREIGN or (root == "torch" and path[0] == "cuda"):  # torch::cuda is the C++ frontend's
        return None, f"it uses {name}, which needs torch's full headers"
    for size in range(len(path), 0, -1):  # the longest known prefix: cuda::detail::TensorInfo -> cuda::detail
        known = "::".join(path[:size])
        if known in _SYMBOLS:
            return _SYMBOLS[known], ""
    if path[0] == "cuda":
        return _CUDA_UMBRELLA, ""
    if len(path) == 1 and _op(path[0]) in ops:
        return _op(path[0]), ""
    if path[0][:1].isupper() or re.fullmatch(r"k[A-Z]\w*", path[0]):
        return None, ""  # a type or a constant: Tensor, ScalarType::Float, Half, kFloat, kCUDA
    return None, f"it uses {name}, which no per-operator header declares"


def chosen_headers(code: str, ops: Mapping[str, str]) -> tuple[list[str], str]:
    """The headers the code's torch names and macros need, the core header first (none where it names
    nothing of torch: raw CUDA); or why no set of headers will do."""
    if not (_QUALIFIED.search(code) or _MACRO.search(code) or _BARE_TORCH.search(code)):
        return [], ""
    found: set[str] = set()
    for match in _QUALIFIED.finditer(code):
        path = [part.strip() for part in match[2].split("::")]
        header, reason = _header_of(match[1], path, ops)
        if reason:
            return [], reason
        if header:
            found.add(header)
    for match in _CALL.finditer(code):  # unqualified calls: found by ADL, or through `using namespace at`
        name = match[1]
        if name in _SYMBOLS and _SYMBOLS[name]:
            found.add(_SYMBOLS[name])
        elif _op(name) in ops:
            found.add(_op(name))
    for match in _MACRO.finditer(code):
        found.update(header for prefix, header in _MACROS if match[0].startswith(prefix))
    if _STREAMS.search(code):  # a tensor printed
        found.add("ATen/core/Formatting.h")
    return [*_CORE, *sorted(found - set(_CORE))], ""


def _op(name: str) -> str:
    return f"ATen/ops/{name}.h"


def declarations_of(header: str) -> str:
    """A generated per-operator header (ATen/ops/NAME.h), or ATen/TensorOperators.h, as a lean prelude holds
    it: without `#pragma once` and its includes, a per-operator header's own NAME_ops.h kept. Of what
    those includes declare, the wrappers use at::Reduction alone (ATen/core/Reduction.h, in the prelude)."""
    return re.sub(r"^#pragma once\n|^#include <(?!ATen/ops/\w+_ops\.h>)[^>\n]+>\n", "", header, flags=re.MULTILINE)


def prelude(headers: list[str] | tuple[str, ...], code: str, ops: Mapping[str, str], inline: bool = True) -> str:
    """What stands first in a lean source: the headers chosen (with `inline`, each that `ops` holds as its
    declarations there, the operators last), the standard library, and torch:: as at:: with the
    spellings of torch/types.h that `code` uses."""
    held = sorted((h for h in headers if inline and h in ops), key=lambda h: (h == OPERATORS, h))
    includes = [f"#include <{h}>" for h in (*headers, *_STANDARD) if h not in held]
    if not headers:
        return "\n".join([*includes, ""])
    includes += ["#include <ATen/core/Reduction.h>"] * bool(held) + [ops[h].rstrip("\n") for h in held]
    aliases = [line for name, line in _TORCH_ALIASES.items() if re.search(rf"\b{name}\b", code)]
    return "\n".join([_PER_OPERATOR, *includes, "namespace torch {", "using namespace at;", "using std::nullopt;",
                      "using std::optional;", *aliases, "}  // namespace torch", ""])


def lean_source(text: str, ops: Mapping[str, str], implicit: bool = False, binding: bool = False) -> LeanSource:
    """`text` with its umbrella torch includes replaced by the headers its code uses. `implicit`: load_inline
    would put its own umbrella before it (torch/types.h before a .cu, torch/extension.h before main.cpp).
    `binding`: it is main.cpp, where load_inline's pybind11 bindings follow it, so its prelude holds what
    they need (BINDING), as it does for a source that uses pybind11 itself. Every line of `text` keeps its number below the prelude (and below cuda.h and
    cuda_runtime.h, which load_inline puts after its implicit header in a .cu); `reason` says why it
    stays as written where it does."""
    umbrellas = list(_UMBRELLA.finditer(code_only(text, strings=False)))
    if not umbrellas and not implicit:
        return LeanSource(text, reason=NO_UMBRELLA)
    code = code_only(text)
    for pattern, reason in _BLOCKERS:
        if pattern.search(code):
            return LeanSource(text, reason=reason)
    headers, reason = chosen_headers(code, ops)
    if reason:
        return LeanSource(text, reason=reason)
    if binding or _PYBIND.search(code):  # bindings of the source's own too: pybind11 with torch's casters
        headers = [BINDING, *(headers or _CORE)]
    # a torch header left in the source that includes a per-operator header would define its wrappers again
    inline = all(_INLINE_SAFE.match(m[1]) for m in _INCLUDE.finditer(code_only(text, strings=False))
                 if not _UMBRELLA.match(m[0]))
    body = list(text)
    for match in reversed(umbrellas):
        body[match.start():match.end()] = REPLACED.format(f"<{match[1]}>")
    first = "".join(f"{line}\n" for line in _IMPLICIT_CU) if implicit and not binding else ""
    return LeanSource(prelude(headers, code, ops, inline) + first + "".join(body), tuple(headers))


@dataclass(frozen=True)
class LeanBuild:
    """load_inline's arguments with lean sources (None where the build stays as written), the torch headers
    their preludes include, and why a source stays as written."""

    arguments: Optional[dict]
    headers: tuple[str, ...] = ()
    reason: str = ""


def lean_arguments(arguments: dict, ops: Mapping[str, str]) -> LeanBuild:
    """load_inline's arguments with main.cpp and the .cu lean, in load_inline's own layout: it is told to add
    no headers (no_implicit_headers), the preludes stand for the ones it would add. None where a source
    that includes torch's umbrella headers (or would get them from load_inline) cannot be rewritten: the
    build is then as written, whole, so a lean build never compiles an umbrella header."""
    if _as_list(arguments.get("sycl_sources")):  # load_inline's implicit header for them is not replaced here
        return LeanBuild(None, reason="it has SYCL sources")
    implicit = not arguments.get("no_implicit_headers")
    cpp, cuda = _as_list(arguments.get("cpp_sources")), _as_list(arguments.get("cuda_sources"))
    sources = {"main.cpp": lean_source("\n".join(cpp), ops, implicit, binding=True)}
    if cuda:
        sources["cuda.cu"] = lean_source("\n".join(cuda), ops, implicit)
    kept = {name: source.reason for name, source in sources.items() if source.reason}
    reason = "; ".join(f"{name}: {why}" for name, why in kept.items())
    if len(kept) == len(sources) or any(why != NO_UMBRELLA for why in kept.values()):
        return LeanBuild(None, reason=reason)
    main, cu = sources["main.cpp"], sources.get("cuda.cu")
    lean = {**arguments, "no_implicit_headers": True, "cpp_sources": cpp if main.reason else [main.text],
            # torch's precompiled header is of torch/extension.h, which a lean main.cpp does not include
            "use_pch": arguments.get("use_pch", False) if main.reason else False}
    if cu is not None:
        lean["cuda_sources"] = cuda if cu.reason else [cu.text]
    return LeanBuild(lean, tuple(sorted({h for source in sources.values() for h in source.headers})), reason)


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)
