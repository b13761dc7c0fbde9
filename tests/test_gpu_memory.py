"""On a GPU the engine counts what a forward allocates beyond its outputs (its workspace) in what
an evaluation needs, and the CUDA graph check's last replay lets the captured inputs go before the
reference process copies the outputs in; the graph is still checked."""
import textwrap

import pytest

from harness.engine.evaluate import EvalOptions, Evaluator, in_process_need
from harness.suite.jobs import write_copy

pytestmark = pytest.mark.gpu

# x * sigmoid(x) holds sigmoid(x), an input-sized temporary, while it runs; 1.25 GiB of input is
# over the size at which the graph is replayed on its captured inputs only
SWISH = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x)

    def get_inputs():
        return [torch.rand(5 << 26)]

    def get_init_inputs():
        return []
''')


def test_gpu_forward_workspace_is_counted_and_the_graph_check_survives_dropping_its_inputs(tmp_path, cache_dir):
    problem = tmp_path / "swish_big.py"
    problem.write_text(SWISH)
    options = EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=1.0, trials=2)
    with Evaluator(problem, options, keep_spare=False) as evaluator:
        result = evaluator.evaluate(write_copy(problem, tmp_path))
        ready = evaluator.oracle_info
    assert result.verdict.value == "correct", result.explanation
    inputs = 5 << 28
    assert ready.input_bytes == ready.output_bytes == inputs
    assert 0.9 * inputs <= ready.workspace_bytes <= 1.1 * inputs  # sigmoid(x) beside x and the output
    assert in_process_need(ready) >= 4 * inputs
    assert result.not_capturable is None
    assert any("replayed on its captured inputs only" in w for w in result.warnings), result.warnings
