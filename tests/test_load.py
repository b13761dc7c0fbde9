"""Load never convicts: the slowdown guard under cores saturated by other processes."""
import os
import subprocess
import sys

from conftest import CANDIDATES, PROBLEMS
from harness import Evaluator, Verdict
from harness.loop.feedback import warning_lines
from harness.stats import overlap

SOFTSIGN = PROBLEMS / "softsign_three_ops.py"
CPP_SOFTSIGN = CANDIDATES / "cpp_softsign.py"  # about 2.5x on a 2-core machine
# the sentences that say why a figure may stand apart from another of the same kernel
UNSURE = ("this speedup is less certain", "the reference ran")
HONEST = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.softsign(x)
'''


def test_an_honest_candidate_is_not_refused_with_the_cores_saturated(cpu_options, tmp_path):
    """A reference of three small ops, host-bound, with twice as many busy processes as cores: load
    slows it beside the candidate and alone by turns; before the guard's retimes were bracketed,
    one evaluation in four here read 2.5x slower beside and was refused."""
    candidate = tmp_path / "softsign.py"
    candidate.write_text(HONEST)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        with Evaluator(SOFTSIGN, cpu_options) as evaluator:
            for _ in range(3):
                result = evaluator.evaluate(candidate)
                assert result.verdict is Verdict.CORRECT, result.explanation
    finally:
        for process in busy:
            process.kill()
            process.wait()


def test_the_same_candidate_five_times_under_load_gives_intervals_that_overlap_or_says_why_not(cpu_options):
    """With twice as many busy processes as cores, one C++ kernel evaluated five times: each two intervals
    overlap, or one of the two says in its text that its reference moved beside the candidate (a gap that a
    second timing did not remove, or a slowdown that put the verdict on the reference alone)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        with Evaluator(SOFTSIGN, cpu_options) as evaluator:
            results = [evaluator.evaluate(CPP_SOFTSIGN) for _ in range(5)]
    finally:
        for process in busy:
            process.kill()
            process.wait()
    for result in results:
        assert result.verdict is Verdict.CORRECT, result.explanation
    said = [any(w.startswith(UNSURE) for w in r.warnings) for r in results]
    for i, a in enumerate(results):
        for j, b in enumerate(results[:i]):
            assert overlap(a.speedup_interval, b.speedup_interval) or said[i] or said[j], \
                [(r.speedup_interval, r.warnings) for r in (a, b)]
    for result in results:  # the gap's sentence is in the text a model reads
        gap = [w for w in result.warnings if w.startswith(UNSURE[0])]
        assert gap == [w for w in warning_lines(result, frozenset()) if w.startswith(UNSURE[0])]
