# Monkeypatched torch.cuda.Event: events whose elapsed_time reports a microsecond whatever ran between them.
# invariant: runtime_guards
# problem: problems/layernorm_4d.py
# device: cuda
# expect: rejected "replaced torch.cuda.Event"
import torch
import torch.nn as nn


class FastEvent:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return 0.001


torch.cuda.Event = FastEvent


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias)
