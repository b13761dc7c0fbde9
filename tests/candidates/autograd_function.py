# Honest and host-bound: LayerNorm as a torch.autograd.Function of many small ops, its backward written out:
# its host path is longer than its device work.
import torch
import torch.nn as nn


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, dims):
        mean = x.mean(dim=dims, keepdim=True)
        centred = x - mean
        rstd = torch.rsqrt(centred.pow(2).mean(dim=dims, keepdim=True) + 1e-5)
        normed = centred * rstd
        ctx.save_for_backward(normed, rstd, weight)
        ctx.dims = dims
        return normed * weight + bias

    @staticmethod
    def backward(ctx, grad):
        normed, rstd, weight = ctx.saved_tensors
        dims = ctx.dims
        batch = tuple(range(grad.dim() - len(dims)))
        g = grad * weight
        dx = rstd * (g - g.mean(dim=dims, keepdim=True) - normed * (g * normed).mean(dim=dims, keepdim=True))
        return dx, (grad * normed).sum(dim=batch), grad.sum(dim=batch), None


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.dims = tuple(range(-len(self.weight.shape), 0))

    def forward(self, x):
        return _LayerNorm.apply(x, self.weight, self.bias, self.dims)
