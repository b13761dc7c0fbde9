# Timing detected from the seed: skips the work once torch.initial_seed() is no longer the model's seed, which is
# when the worker itself draws inputs from a seed.
# The worker draws trial inputs from a seed too, so the seed no longer tells timing from trials.
# invariant: checked_calls
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "while being timed" "differs from the reference"
import torch
import torch.nn as nn


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
        self.seed = torch.initial_seed()  # the seed the model was built from

    def forward(self, x):
        if torch.initial_seed() != self.seed:
            return torch.empty_like(x)
        return layer_norm(x, self.weight, self.bias)
