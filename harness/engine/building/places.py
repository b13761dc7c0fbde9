"""Compiler diagnostics on the candidate file's own lines.

load_inline writes the sources a candidate passes into files of its own: main.cpp (`#include
<torch/extension.h>`, then cpp_sources joined by newlines, then the bindings it generates) and
cuda.cu (three includes, then cuda_sources), and the compiler names their lines. Where the line
lies in a string literal of the candidate file, found whole in the generated file, the diagnostic
names the candidate's line first ("kernel.py line 82 (main.cpp:78:5): error: ..."), and the source
line the compiler quotes after it carries that number too. A line of a source built at run time
(joined, formatted) keeps the compiler's place, saying why.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# gcc/clang "DIR/main.cpp:12:5: error: ...", "In file included from DIR/main.cpp:3:", nvcc "DIR/cuda.cu(12): error"
_GENERATED = re.compile(r"(?P<path>/\S*/(?P<file>main\.cpp|cuda\.cu))"
                        r"(?::(?P<line>\d+)(?::(?P<column>\d+))?|\((?P<nvcc_line>\d+)\))(?=:)")
# the line gcc quotes after its diagnostic ("   78 |   code")
_QUOTE = re.compile(r"^ *(?P<line>\d+) \|")
# a literal's opening: its prefix and quotes
_OPENING = re.compile(r"[rRbBuU]*('''|\"\"\"|'|\")")


@dataclass(frozen=True)
class Literal:
    """A string literal whose every line stands as it is in the file (no escapes, joins or
    continuations change it): its text, the file line of its first line and the column it starts at."""

    text: str
    line: int
    column: int  # 0-based, in characters


@dataclass(frozen=True)
class Place:
    line: int
    column: Optional[int]  # 1-based, as compilers count; None where the compiler gave none


def literals(source: str) -> list[Literal]:
    """The candidate's multi-line string literals that stand line for line in its text."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = re.split(r"\r\n?|\n", source)  # the line ends Python's tokenizer counts, no others
    formatted = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value
                and id(node) not in formatted and node.end_lineno - node.lineno == node.value.count("\n")):
            continue
        first = lines[node.lineno - 1]
        start = len(first.encode()[:node.col_offset].decode(errors="replace"))  # ast counts UTF-8 bytes
        opening = _OPENING.match(first, start)
        if opening is None:
            continue
        literal = Literal(node.value, node.lineno, opening.end())
        if all(lines[literal.line - 1 + i].startswith(text, literal.column if i == 0 else 0)
               for i, text in enumerate(literal.text.split("\n"))):
            found.append(literal)
    return found


def candidate_place(generated: str, line: int, column: Optional[int], found: list[Literal]) -> Optional[Place]:
    """Where the generated file's `line` (and `column`, 1-based) stands in the candidate: in the
    longest literal found exactly once in the generated text whose lines hold it; None elsewhere."""
    for literal in sorted(found, key=lambda lit: -len(lit.text)):
        at = generated.find(literal.text)
        if at < 0 or generated.find(literal.text, at + 1) >= 0:
            continue
        first = generated.count("\n", 0, at) + 1
        index = line - first
        if not 0 <= index <= literal.text.count("\n"):
            continue
        text = literal.text.split("\n")[index]
        shift = at - (generated.rfind("\n", 0, at) + 1) if index == 0 else 0  # where it starts on its line
        offset = literal.column if index == 0 else 0
        if column is None:
            return Place(literal.line + index, None)
        if shift < column <= shift + len(text) + 1:  # on the literal's part of the line (or just past it)
            return Place(literal.line + index, column - shift + offset)
    return None


def generated_files(log_text: str, root: Path) -> dict[str, str]:
    """The generated files the diagnostics in `log_text` name, read, where they lie under `root`."""
    found = {}
    for path in {m.group("path") for m in _GENERATED.finditer(log_text)}:
        try:
            if Path(path).resolve().is_relative_to(Path(root).resolve()):
                found[path] = Path(path).read_text(errors="replace")
        except OSError:
            continue
    return found


def on_candidate_lines(log_text: str, name: str, source: str, generated: dict[str, str]) -> str:
    """`log_text` with each diagnostic that names a line of a generated file (`generated`: path ->
    text) naming the candidate file `name`'s line instead, and the quoted source line below it."""
    found = literals(source)
    out: list[str] = []
    quoted: Optional[tuple[int, int]] = None  # the generated line quoted next, and its line in the candidate
    for text in log_text.split("\n"):
        quote = _QUOTE.match(text)
        if quote and quoted and int(quote.group("line")) == quoted[0]:  # gcc's gutter is 5 wide: numbers fit
            text = f"{quoted[1]:>{quote.end('line')}}" + text[quote.end("line"):]
        quoted = None
        match = _GENERATED.search(text)
        if match and match.group("path") in generated:
            line = int(match.group("line") or match.group("nvcc_line"))
            column = int(match.group("column")) if match.group("column") else None
            where = match.group("file") + f":{line}" + (f":{column}" if column else "")
            place = candidate_place(generated[match.group("path")], line, column, found)
            if place:
                quoted = (line, place.line)
                said = f"{name} line {place.line}" + (f", column {place.column}" if place.column else "")
                text = text[:match.start()] + f"{said} ({where})" + text[match.end():]
            else:
                text = (text[:match.start()] + f"{where} (of the sources as passed at run time: no string "
                        f"literal of {name} holds this line)" + text[match.end():])
        out.append(text)
    return "\n".join(out)
