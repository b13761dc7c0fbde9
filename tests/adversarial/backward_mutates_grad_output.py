# Right gradients, then the upstream gradient overwritten in place (as a kernel that reuses its memory does).
# invariant: inputs_unchanged
# problem: tests/problems/rmsnorm_train_small.py
# device: cpu
# expect: incorrect "changed the upstream gradient"
# options: backward
import importlib.util
from pathlib import Path

# the correct candidate, tests/candidates/backward_rmsnorm.py, changed in one place below
_spec = importlib.util.spec_from_file_location("backward_rmsnorm", Path(__file__).resolve().parent.parent / "candidates"
                                               / "backward_rmsnorm.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)


class RMSNorm(base.RMSNorm):
    @staticmethod
    def backward(ctx, grad):
        grads = base.RMSNorm.backward(ctx, grad)
        grad.zero_()
        return grads


class ModelNew(base.ModelNew):
    def forward(self, x):
        return RMSNorm.apply(x, self.weight, self.eps)
