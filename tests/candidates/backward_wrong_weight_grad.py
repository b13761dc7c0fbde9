# RMSNorm whose weight gradient is 2% too big everywhere (as a wrong scale in a reduction gives).
import importlib.util
from pathlib import Path

# the correct candidate beside this file, backward_rmsnorm.py, changed in one place below
_spec = importlib.util.spec_from_file_location("backward_rmsnorm",
                                               Path(__file__).resolve().with_name("backward_rmsnorm.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)


class RMSNorm(base.RMSNorm):
    @staticmethod
    def backward(ctx, grad):
        grad_x, grad_weight, _ = base.RMSNorm.backward(ctx, grad)
        return grad_x, 1.02 * grad_weight, None


class ModelNew(base.ModelNew):
    def forward(self, x):
        return RMSNorm.apply(x, self.weight, self.eps)
