"""Answer extraction: from a model's raw answer to the candidate's source.

Pure text functions. Reasoning (`<think>...</think>`) is dropped first, then
the last fenced Python block that defines `ModelNew` is the candidate: models
often quote the prompt's code or sketch drafts before the final answer.
"""
from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass
from typing import Optional


class Extraction(str, enum.Enum):
    OK = "ok"
    NO_CODE = "no_code"  # no fenced Python block at all
    NO_MODELNEW = "no_modelnew"  # blocks, but none defines ModelNew
    UNFINISHED_REASONING = "unfinished_reasoning"  # <think> opened and never closed


@dataclass
class Extracted:
    status: Extraction
    code: Optional[str]
    message: str  # one paragraph for the feedback; empty when status is OK
    blocks: int = 0  # fenced Python blocks seen after the reasoning
    truncated: bool = False  # the chosen block's closing fence is missing


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+.-]*)[^\n`]*$")
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
# A definition at the top level: a class or an assignment, not a mere use.
_DEFINES_MODELNEW = re.compile(r"^(class\s+ModelNew\b|ModelNew\s*=)", re.MULTILINE)


def _split_reasoning(answer: str) -> tuple[str, bool]:
    """(the answer without its reasoning, whether the reasoning never ended).

    Closed `<think>` blocks are removed. A `</think>` with no opening tag means
    the chat template opened the reasoning inside the prompt (as many do), so
    everything before it is reasoning too. An opening tag that never closes
    means the answer ended while still reasoning: the rest is dropped.
    """
    text = _THINK_BLOCK.sub("", answer)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[:opened.start()]
    return text.strip(), opened is not None


def strip_reasoning(answer: str) -> str:
    """The answer without its reasoning: what a conversation should carry forward."""
    return _split_reasoning(answer)[0]


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language tag, body, closed) of each fenced block, in order."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, tag = opening.group(1), opening.group(2).lower()
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                closed = True
                i += 1
                break
            body.append(lines[i])
            i += 1
        blocks.append((tag, "\n".join(body), closed))
    return blocks


def extract(answer: str, *, cut_off: bool = False) -> Extracted:
    """The candidate in `answer`; `cut_off` says the answer hit its token limit."""
    text, unfinished = _split_reasoning(answer)
    python = [(body, closed) for tag, body, closed in fenced_blocks(text) if tag in _PYTHON_TAGS]
    limit_note = (" The answer was cut off at the token limit; leave room for the final code "
                  "by reasoning more briefly.") if cut_off else ""
    for body, closed in reversed(python):
        if _DEFINES_MODELNEW.search(body):
            return Extracted(Extraction.OK, body.strip("\n") + "\n", "", len(python), not closed)
    if unfinished:
        return Extracted(Extraction.UNFINISHED_REASONING, None,
                         "The answer ended inside its reasoning (`<think>` was never closed), so "
                         "it holds no code. Finish with the complete Python file in one ```python "
                         "block." + limit_note, len(python))
    if not python:
        return Extracted(Extraction.NO_CODE, None,
                         "The answer holds no fenced Python code block. End the answer with the "
                         "complete Python file, defining `class ModelNew(nn.Module)`, in one "
                         "```python block." + limit_note, 0)
    return Extracted(Extraction.NO_MODELNEW, None,
                     f"The answer holds {len(python)} Python code block(s), but none defines "
                     "`ModelNew` at the top level. The last ```python block must be the whole "
                     "file and define `class ModelNew(nn.Module)` with the same constructor and "
                     "forward arguments as `Model`." + limit_note, len(python))


_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
# A short heading before a colon ("Approach:", "My plan:"), which names the summary rather than being it.
_LABEL = re.compile(r"^\W*\w+(?:\s+\w+){0,2}\s*:\s+(?=\S)")
_COMMENT = re.compile(r"^#\s*(\S.*)$", re.MULTILINE)


def _file_summary(code: str) -> str:
    """The first line of the file's own docstring, else its first comment. Python's parser finds the
    docstring: a line that merely starts with quotes may close a string (a CUDA source) instead."""
    try:
        doc = ast.get_docstring(ast.parse(code))
    except (SyntaxError, ValueError):
        doc = None
    if doc and doc.strip():
        return doc.strip().splitlines()[0]
    found = _COMMENT.search(code)
    return found.group(1) if found else ""


def approach(answer: str, code: Optional[str], limit: int) -> str:
    """A round's approach in its author's words, cut to `limit` characters: the first sentence
    of the prose around the code, else the file's docstring or first comment."""
    text = "" if code is not None and answer.strip() == code.strip() else strip_reasoning(answer)
    prose = []
    inside = False
    for line in text.splitlines():
        if _FENCE.match(line):
            inside = not inside
        elif not inside and line.strip() and not line.lstrip().startswith(("#", "|", "-" * 3)):
            prose.append(line.strip().lstrip("*#>- ").strip())
    words = " ".join(prose).replace("**", "").replace("__", "")
    if not words and code:
        words = _file_summary(code)
    words = _LABEL.sub("", words.strip())
    words = _SENTENCE_END.split(words, maxsplit=1)[0] if words else ""
    return words if len(words) <= limit else words[:limit - 3].rstrip() + "..."
