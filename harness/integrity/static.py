"""A static report on a candidate's source: what it calls, never what it computes.

The Python is read with `ast` and the CUDA/C++ it carries (string constants)
as text; nothing is run. A finding names a shortcut that makes a measurement
mean less than it seems: calling the reference's own op, torch.compile, a
try/except that falls back to torch, no kernel at all, reaching into the
harness's process, or replacing what the harness and the reference share.
Under the "strict" policy a finding of a rejecting kind refuses the candidate;
under "warn" (the default) every finding is only shown. What is looked for, and
how, is static_rules.py's; here is the report and the policy's verdict.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Optional

from .static_rules import FAMILIES, Finding, Scan

POLICIES = ("warn", "strict")


@dataclass
class StaticReport:
    findings: list[Finding] = field(default_factory=list)
    reference_ops: list[str] = field(default_factory=list)  # op families the problem's Model uses

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}


# Kinds of finding that the strict policy rejects. The others are hints that honest
# kernels also trip (a workspace kept on self, a half-precision helper), or a syntax
# error, which every policy refuses before the build (syntax_error).
STRICT_CODES = frozenset({
    "reference_op", "torch_compile", "fallback", "no_kernel", "harness_access", "monkeypatch",
    "tensor_subclass", "process_exit", "background_work", "side_stream", "persisting_l2", "cuda_graph",
})

_PROBLEM_LOW_PRECISION = re.compile(r"float16|bfloat16|\bhalf\b|fp16|bf16")


def describe(finding: Finding) -> str:
    return f"{finding.message} (line {finding.line})"


def static_verdict(report: StaticReport, policy: str = "warn") -> Optional[str]:
    """The reason to reject the candidate under `policy`, or None to go on."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    rejecting = [f for f in report.findings if f.code in STRICT_CODES]
    if policy == "warn" or not rejecting:
        return None
    return "Under the strict policy its source is refused: " + "; ".join(map(describe, rejecting)) + "."


def syntax_error(report: StaticReport) -> Optional[str]:
    """Why the file does not parse, where it does not: nothing of it can build or import."""
    found = next((f for f in report.findings if f.code == "syntax_error"), None)
    return describe(found) if found else None


def warnings(report: StaticReport) -> list[str]:
    return [f"static check: {describe(f)}" for f in report.findings]


def reference_families(problem_source: str) -> list[str]:
    """Op families the problem's Model uses, from the names in its source
    (get_inputs and get_init_inputs aside)."""
    try:
        tree = ast.parse(problem_source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for top in tree.body:
        if isinstance(top, ast.FunctionDef) and top.name in ("get_inputs", "get_init_inputs"):
            continue
        for node in ast.walk(top):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                names.add("@")
    return sorted(family for family, (reveal, _) in FAMILIES.items() if names & reveal)


def analyse(source: str, problem_source: str) -> StaticReport:
    """The static report on a candidate's source for the problem whose source is given."""
    families = reference_families(problem_source)
    report = StaticReport(reference_ops=families)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        report.findings.append(Finding("syntax_error", f"the file does not parse: {exc.msg}", exc.lineno or 0))
        return report
    scan = Scan(tree, families, low_precision_is_new=not _PROBLEM_LOW_PRECISION.search(problem_source))
    seen: set[tuple[str, str]] = set()
    for finding in sorted(scan.findings(), key=lambda f: f.line):
        if (finding.code, finding.message) not in seen:
            seen.add((finding.code, finding.message))
            report.findings.append(finding)
    return report
