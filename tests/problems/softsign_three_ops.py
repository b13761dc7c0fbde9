"""Softsign as three small elementwise ops (abs, add, divide) on a (16, 16384) float32 input: a
reference bound by the host's per-op cost, as a KernelBench level 1 Softsign is on a GPU (three
launches of about 15 us). Host load slows it most, beside a candidate or alone."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x / (1 + torch.abs(x))


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return []
