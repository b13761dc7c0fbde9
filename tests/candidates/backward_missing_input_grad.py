# RMSNorm whose backward returns no gradient for its input.
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
        return None, base.RMSNorm.backward(ctx, grad)[1], None


class ModelNew(base.ModelNew):
    def forward(self, x):
        return RMSNorm.apply(x, self.weight, self.eps)
