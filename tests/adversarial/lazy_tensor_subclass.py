# Lazy Tensor subclass: an empty subclass whose __torch_function__ computes the LayerNorm when the checker touches it.
# invariant: output_form
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "Tensor subclass"
import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, x, weight, bias):
        self = torch.Tensor._make_subclass(cls, torch.empty_like(x))
        self.pending = (x, weight, bias)
        return self

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for arg in args:
            if isinstance(arg, Lazy) and arg.pending is not None:
                x, weight, bias = arg.pending
                arg.pending = None
                with torch._C.DisableTorchFunctionSubclass():
                    torch.Tensor.copy_(arg, layer_norm(x, weight, bias))
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return Lazy(x, self.weight.detach(), self.bias.detach())
