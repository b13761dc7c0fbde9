"""Nothing a candidate writes to the harness's private channel ends the harness: a
malformed, oversized or out-of-order frame, in place of each message the candidate
worker sends, is a `rejected` verdict that names the channel."""
import json
import struct

import pytest

from conftest import PROBLEMS
from harness.engine.evaluate import Evaluator
from harness.results import Verdict

# A correct LayerNorm that first writes JUNK to the worker's channel (its fd is the worker's
# last argument) at POINT: at import (in place of CandidateReady), in a trial (TrialOutputs)
# or while timed (Timed).
TEMPLATE = '''
import os, socket, sys
import torch
import torch.nn as nn

def being_timed():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith("timing.clock"):
            return True
        frame = frame.f_back
    return False

def write_junk():
    sock = socket.socket(fileno=os.dup(int(sys.argv[2])))
    sock.sendall(JUNK)

if POINT == "import":
    write_junk()

class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.dims = tuple(range(-len(normalized_shape), 0))
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        if POINT == ("timed" if being_timed() else "trial"):
            write_junk()
        mean = x.mean(dim=self.dims, keepdim=True)
        var = x.var(dim=self.dims, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + 1e-5) * self.weight + self.bias
'''


def frame(payload: bytes, length: int | None = None) -> bytes:
    return struct.pack("!QI", len(payload) if length is None else length, 0) + payload


OTHER_KIND = {"import": "Timed", "trial": "CandidateReady", "timed": "TrialOutputs"}
JUNK = {
    "malformed": lambda point: frame(b"\x00not json"),
    "oversized": lambda point: frame(b"{}", length=1 << 40),
    "out_of_order": lambda point: frame(json.dumps({"kind": OTHER_KIND[point], "tensors": []}).encode()),
    "not_an_object": lambda point: frame(b"[1, 2, 3]"),
}


@pytest.fixture(scope="module")
def evaluator(cpu_options):
    with Evaluator(PROBLEMS / "small_layernorm.py", cpu_options) as ev:
        yield ev


@pytest.mark.parametrize("junk", sorted(JUNK))
@pytest.mark.parametrize("point", ["import", "trial", "timed"])
def test_junk_on_the_channel_is_rejected(evaluator, tmp_path, point, junk):
    candidate = tmp_path / f"junk_{point}_{junk}.py"
    candidate.write_text(f"POINT = {point!r}\nJUNK = {JUNK[junk](point)!r}\n" + TEMPLATE)
    result = evaluator.evaluate(candidate)
    assert result.verdict is Verdict.REJECTED, result.explanation
    assert "channel" in result.explanation
