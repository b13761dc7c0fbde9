"""PyTorch's stream-order contract, probed: an op's work is ordered after its caller's current stream,
and its outputs are ready on that stream when it returns.

The probe makes a call's inputs on the caller's stream behind a delay: the floating-point inputs'
bits are flipped (`decoy`), the device spins, and the same flip on the caller's stream restores
them. Work that waits for the caller's stream reads the inputs drawn; work that does not (a stream
of its own with no `wait_stream`) runs during the spin and reads the flipped values, so its outputs
are wrong whatever the tolerance. Outputs read on the caller's stream as the call returns (the
re-check's samples, a trial's digest at return) show work the caller's stream does not wait for.

The flip is exact and its own inverse (an XOR of the sign and the top mantissa bit): every value
comes back bit for bit, NaN and infinity included, and none becomes the other's. Integer and
boolean inputs are left alone: flipped indices would fault a racing kernel rather than mislead it.
"""
from __future__ import annotations

import torch

# float dtype: (its integer view, the bits flipped: the sign and the mantissa's top bit)
_VIEWS = {torch.float32: (torch.int32, 32, 23), torch.float64: (torch.int64, 64, 52),
          torch.float16: (torch.int16, 16, 10), torch.bfloat16: (torch.int16, 16, 7)}
_MASKS = {dtype: (view, -(1 << (bits - 1)) | (1 << (mantissa - 1))) for dtype, (view, bits, mantissa) in _VIEWS.items()}

# How long a trial's inputs stay flipped: longer than the candidate's call takes the host to submit (so
# work it launches without waiting starts before they are restored), at least this and at most MAX.
TRIAL_SPIN_MIN_MS = 5.0
TRIAL_SPIN_MAX_MS = 50.0
TRIAL_SPIN_FACTOR = 4.0  # times the host time of the candidate's previous call



def decoy(values: list) -> int:
    """Flip (or flip back) the floating-point tensors among `values` in place, on the current stream;
    how many were flipped."""
    flipped = 0
    with torch.no_grad():
        for value in values:
            if type(value) is torch.Tensor and value.dtype in _MASKS and value.numel():
                view, mask = _MASKS[value.dtype]
                value.detach().view(view).bitwise_xor_(mask)
                flipped += 1
    return flipped


def trial_spin_ms(host_ms: float) -> float:
    """The spin before a probed trial, from the host time of the candidate's previous call (0: none yet)."""
    return min(TRIAL_SPIN_MAX_MS, max(TRIAL_SPIN_MIN_MS, TRIAL_SPIN_FACTOR * host_ms))
