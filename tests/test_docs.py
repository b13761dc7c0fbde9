"""docs/ and the command line agree: every flag of every command appears in docs/, and every flag
docs/ or README names exists.

A flag in a page is a token `--name` (lower case, digits and dashes) that stands alone: not part of
a longer word (`--use_fast_math` is nvcc's, not ours). Flags of the `bench/` scripts count as
existing (read from their `add_argument` calls), and so do the few of other tools the pages quote
(OTHER_TOOLS)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from harness.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w-])")
# pip's, pytest's, Nsight Compute's, nvcc's and `ray start`'s flags quoted in the pages
OTHER_TOOLS = {"--no-deps", "--no-build-isolation", "--kernel-name", "--help", "--threads", "--time", "--no-index",
               "--find-links", "--target", "--resources", "--dist", "--no-loadscope-reorder"}
SCRIPT_FLAG = re.compile(r"""add_argument\(\s*["'](--[a-z][a-z0-9-]*)["']""")


def cli_flags() -> dict[str, set[str]]:
    """Every command's option strings (long ones), by command; the top level's as "harness"."""
    parser = build_parser()
    flags = {"harness": {o for a in parser._actions for o in a.option_strings if o.startswith("--")}}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        flags[name] = {o for a in command._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
    flags["harness"] -= {"--help"}
    return flags


def script_flags() -> set[str]:
    return {m for folder in ("bench", "examples") for path in (ROOT / folder).glob("*.py")
            for m in SCRIPT_FLAG.findall(path.read_text())}


def named(path: Path) -> set[str]:
    return set(FLAG.findall(path.read_text()))


def test_the_flag_pattern_takes_flags_and_leaves_other_dashes():
    assert FLAG.findall("`--time-cap S`, [--gpus 0,1] (--dry-run) --use_fast_math a--b ---x -- x") == \
        ["--time-cap", "--gpus", "--dry-run"]


def test_every_flag_of_every_command_is_in_docs():
    documented = set().union(*(named(page) for page in DOCS.glob("*.md")))
    missing = {command: sorted(flags - documented) for command, flags in cli_flags().items()}
    missing = {command: flags for command, flags in missing.items() if flags}
    assert not missing, "flags no page of docs/ names, by command (document them, in docs/cli.md or the " \
                        "page of their subject):\n" + "\n".join(f"  harness {c}: {' '.join(f)}" for c, f in
                                                                missing.items())


def test_every_flag_the_pages_name_exists():
    known = set().union(*cli_flags().values()) | script_flags() | OTHER_TOOLS
    pages = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
    unknown = {page.relative_to(ROOT): sorted(named(page) - known) for page in pages}
    unknown = {page: flags for page, flags in unknown.items() if flags}
    assert not unknown, "flags no command (nor bench/ or examples/ script) has, by page:\n" + \
        "\n".join(f"  {page}: {' '.join(flags)}" for page, flags in unknown.items())


def test_docs_index_links_every_page():
    index = (DOCS / "README.md").read_text()
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages and not {p for p in pages if f"({p})" not in index}


def test_links_between_pages_lead_to_files():
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in [*DOCS.glob("*.md"), ROOT / "README.md"]
              for target in link.findall(page.read_text())
              if not target.startswith("http") and not (page.parent / target).exists()]
    assert not broken, "\n".join(broken)
