# Right gradients for the check trials, then the last ones again: each timed backward costs nothing.
# invariant: checked_calls
# problem: tests/problems/rmsnorm_train_small.py
# device: cpu
# expect: incorrect "while being timed"
# options: backward
import importlib.util
from pathlib import Path

# the correct candidate, tests/candidates/backward_rmsnorm.py, changed in one place below
_spec = importlib.util.spec_from_file_location("backward_rmsnorm", Path(__file__).resolve().parent.parent / "candidates"
                                               / "backward_rmsnorm.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

calls, kept = 0, None


class RMSNorm(base.RMSNorm):
    @staticmethod
    def backward(ctx, grad):
        global calls, kept
        calls += 1
        if calls <= 5 or kept is None:
            kept = base.RMSNorm.backward(ctx, grad)
        return kept


class ModelNew(base.ModelNew):
    def forward(self, x):
        return RMSNorm.apply(x, self.weight, self.eps)
