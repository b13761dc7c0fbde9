"""Load never convicts: the slowdown guard under cores saturated by other processes."""
import os
import subprocess
import sys

from conftest import PROBLEMS
from harness import Evaluator, Verdict

SOFTSIGN = PROBLEMS / "softsign_three_ops.py"
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
