"""ReLU on 256 MiB of float32 input (64M elements), for the engine's memory footprint on a CPU
(big enough that an extra copy shows, small enough for a test on a busy 2-core machine).

The input repeats a 4 MiB random block, so a draw costs a copy rather than 256M random numbers."""
import torch
import torch.nn as nn

ELEMENTS = 1 << 26


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [(torch.rand(1 << 20) - 0.5).repeat(ELEMENTS >> 20)]


def get_init_inputs():
    return []
