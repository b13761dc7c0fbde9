"""The source lines of a C++ extension that perf's samples fall on, where it was built with debug info.

A sample's address, less where its shared object was mapped, is an offset in the file; the
program headers (readelf) turn it into the address the debug info speaks of, and one addr2line
call per shared object names the lines. Built without -g, addr2line knows no line and the list
is empty. Pure but for what runs readelf and addr2line (segments, addr2line) and reads the sources.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Optional

from ...profiles import SampledLine
from .perf import Mapping, Sample

TOP_LINES = 10
ADDRESSES = 400  # resolved per shared object, most sampled first: the rest are a few samples each
TOOL_LIMIT_S = 60.0
TEXT_CHARS = 100
LOAD = re.compile(r"^\s*LOAD\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x[0-9a-f]+\s+0x([0-9a-f]+)", re.M)
WHERE = re.compile(r"^(.*):(\d+)(?: \(discriminator \d+\))?$")


def file_offsets(samples: list[Sample], mappings: list[Mapping], path: str) -> Counter:
    """Samples by offset in the file `path`, for the samples that fall in its executable mappings."""
    spans = [m for m in mappings if m.path == path]
    offsets: Counter = Counter()
    for s in samples:
        if s.dso != path:
            continue
        span = next((m for m in spans if m.start <= s.ip < m.start + m.length), None)
        if span:
            offsets[s.ip - span.start + span.offset] += 1
    return offsets


def parse_segments(readelf: str) -> list[tuple[int, int, int]]:
    """(file offset, virtual address, size in the file) of each loadable segment in `readelf -lW` output."""
    return [(int(o, 16), int(v, 16), int(n, 16)) for o, v, n in LOAD.findall(readelf)]


def address_of(offset: int, segments: list[tuple[int, int, int]]) -> Optional[int]:
    return next((vaddr + offset - start for start, vaddr, size in segments if start <= offset < start + size), None)


def parse_where(line: str) -> Optional[tuple[str, int]]:
    """addr2line's `file:line` (or `file:line (discriminator n)`); None for an unknown line (`??:0`, `x.cpp:?`)."""
    found = WHERE.match(line.strip())
    if not found or found[1] == "??" or found[2] == "0":
        return None
    return found[1], int(found[2])


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, timeout=TOOL_LIMIT_S)
    return done.stdout.decode(errors="replace") if done.returncode == 0 else ""


def lines_of(path: str, samples: list[Sample], mappings: list[Mapping]) -> Counter:
    """Samples by (source file, line) in the shared object `path`; empty without debug info or binutils."""
    readelf, addr2line = shutil.which("readelf"), shutil.which("addr2line")
    offsets = file_offsets(samples, mappings, path)
    if not (readelf and addr2line and offsets):
        return Counter()
    segments = parse_segments(_run([readelf, "-lW", path]))
    chosen = [(address_of(o, segments), n) for o, n in offsets.most_common(ADDRESSES)]
    chosen = [(a, n) for a, n in chosen if a is not None]
    if not chosen:
        return Counter()
    answers = _run([addr2line, "-e", path, *(hex(a) for a, _ in chosen)]).splitlines()
    found: Counter = Counter()
    for (_, n), answer in zip(chosen, answers):
        where = parse_where(answer)
        if where:
            found[where] += n
    return found


def source_text(file: str, line: int, cache: dict[str, list[str]]) -> str:
    if file not in cache:
        try:
            cache[file] = Path(file).read_text(errors="replace").splitlines()
        except OSError:
            cache[file] = []
    text = cache[file][line - 1].strip() if 0 < line <= len(cache[file]) else ""
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS - 3] + "..."


def source_lines(paths: set[str], samples: list[Sample], mappings: list[Mapping]) -> list[SampledLine]:
    """The most sampled lines of the shared objects `paths` (the candidate's extensions), most first."""
    found: Counter = Counter()
    for path in sorted(paths):
        found.update(lines_of(path, samples, mappings))
    cache: dict[str, list[str]] = {}
    return [SampledLine(Path(file).name, line, n, source_text(file, line, cache))
            for (file, line), n in found.most_common(TOP_LINES)]
