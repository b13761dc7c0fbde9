# RMSNorm whose backward is its own: a torch.autograd.Function with the gradients written out.
import torch
import torch.nn as nn


class RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, inv)
        return x * inv * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, inv = ctx.saved_tensors
        normed = x * inv
        grad_weight = (grad * normed).reshape(-1, weight.numel()).sum(0)
        scaled = grad * weight
        grad_x = inv * (scaled - normed * (scaled * normed).mean(-1, keepdim=True))
        return grad_x, grad_weight, None


class ModelNew(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return RMSNorm.apply(x, self.weight, self.eps)
