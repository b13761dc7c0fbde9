"""Which torch headers an extension is built with, chosen once per extension and remembered in its
directory (`headers.json`): its first build tries the lean `.cu` (lean.py); where that does not
compile, the sources as written are built at once, and every later call (the candidate's worker, the
same sources in another file) goes straight to what built, so no candidate pays twice."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from ...files import write_atomic
from ...results import Headers, from_json, to_json
from ...torch_install import torch_dir
from .cache import first_errors
from .lean import OPERATORS, declarations_of, lean_arguments

HEADERS_RECORD = "headers.json"
# What torch's load_inline raises where ninja failed (it carries the compilers' output).
BUILD_FAILED = "Error building extension"
# ninja's line for a failed compile (an object), as against the link (the library)
_COMPILE_FAILED = re.compile(r"^FAILED: (\[code=\d+\] )?\S+\.o\s*$", re.MULTILINE)


@dataclass
class HeadersChoice:
    """An extension's headers: `lean` (with the torch headers its preludes `included`) or `full` (the
    sources as written); why a source stays as written (the rewrite did not apply to it, or the lean
    build failed: its compiler's `lean_errors`)."""

    headers: Headers
    included: list[str] = field(default_factory=list)
    reason: str = ""
    lean_errors: list[str] = field(default_factory=list)


def read_choice(directory: Path) -> Optional[HeadersChoice]:
    try:
        return from_json(HeadersChoice, (Path(directory) / HEADERS_RECORD).read_text())
    except (OSError, ValueError, TypeError):
        return None


def _record(directory: Path, choice: HeadersChoice) -> None:
    write_atomic(Path(directory) / HEADERS_RECORD, to_json(choice))


class TorchOps(Mapping):
    """The headers a lean prelude may hold as their declarations (lean.declarations_of), by path: torch's
    per-operator headers (ATen/ops/NAME.h beside NAME_ops.h) and its tensor operators; each read when
    first asked."""

    def __init__(self, include: Path):
        self.include = include
        self.names = frozenset({OPERATORS, *(f"ATen/ops/{p.name[:-len('_ops.h')]}.h"
                                             for p in (include / "ATen" / "ops").glob("*_ops.h"))})
        self.read: dict[str, str] = {}

    def __contains__(self, header: object) -> bool:
        return header in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, header: str) -> str:
        if header not in self.names:
            raise KeyError(header)
        if header not in self.read:
            self.read[header] = declarations_of((self.include / header).read_text())
        return self.read[header]


@functools.lru_cache(maxsize=1)
def torch_ops() -> TorchOps:
    return TorchOps(torch_dir() / "include")


def build_failed(exc: BaseException) -> bool:
    """Whether load_inline raised because a compiler or the linker failed."""
    return BUILD_FAILED in str(exc)


def build_with_headers(load: Callable[..., Any], arguments: dict, directory: Path) -> tuple[Any, Headers]:
    """load_inline (`load`) called with `arguments`, lean where the extension's record or a first lean
    build says so, else as written; returns what it returned and the headers it was built with."""
    known = read_choice(directory)
    if known is not None and known.headers is Headers.FULL:
        return load(**arguments), Headers.FULL
    lean = lean_arguments(arguments, torch_ops())
    if lean.arguments is None:
        _record(directory, HeadersChoice(Headers.FULL, reason=lean.reason))
        return load(**arguments), Headers.FULL
    if known is not None:  # built lean before: this call only loads it
        return load(**lean.arguments), Headers.LEAN
    built = HeadersChoice(Headers.LEAN, list(lean.headers), lean.reason)
    kept = _versioner_entry(arguments["name"])
    try:
        # quiet: a lean build's errors must not reach the log, where the build's own errors are read
        module = load(**{**lean.arguments, "verbose": False})
    except Exception as exc:  # noqa: BLE001 - anything but a failed compile is the candidate's own
        if not (build_failed(exc) and _COMPILE_FAILED.search(str(exc))):  # a link fails as written too
            _record(directory, built)
            raise
        errors = first_errors(str(exc))
    else:
        _record(directory, built)
        return module, Headers.LEAN
    # outside the handler: the build as written raises its own error alone, not chained to the lean one's
    _restore_versioner(arguments["name"], kept)
    _record(directory, HeadersChoice(Headers.FULL, reason="its lean build failed", lean_errors=errors))
    return load(**arguments), Headers.FULL


# torch numbers the builds of one extension name in a process (name, name_v1, ...) by its sources' hash,
# and the number is in the built library's name: the sources as written, built after a failed lean build,
# must keep the number they get in a process that builds them first (the candidate's worker).
def _versioner_entry(name: str):
    from torch.utils import cpp_extension

    return cpp_extension.JIT_EXTENSION_VERSIONER.entries.get(name)


def _restore_versioner(name: str, entry) -> None:
    from torch.utils import cpp_extension

    entries = cpp_extension.JIT_EXTENSION_VERSIONER.entries
    if entry is None:
        entries.pop(name, None)
    else:
        entries[name] = entry
