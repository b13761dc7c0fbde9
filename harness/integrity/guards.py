"""Runtime guards in the process that runs candidate code.

What a candidate may not leave behind after it ran: swapped functions in the
namespaces the harness relies on, torch function or dispatch modes, background
threads, reduced float32 precision, persisting L2. The candidate worker takes
the namespaces (torch's and the engine's own) before candidate code runs and
reports what changed with every reply.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Callable, Iterator

import torch

from .refusals import REFUSALS


class Guard:
    """Every callable in the namespaces the harness relies on, as they were
    before candidate code ran; a candidate that swaps one is caught.

    Whole namespaces, not a list of names: slowing the reference through
    torch.nn.functional, drawing other inputs through torch.randn, or
    replacing the clock all go through one of them."""

    def __init__(self):
        self.saved: dict[str, tuple[object, str, object]] = {}

    def take(self, label: str, namespace: object) -> None:
        for name, value in list(vars(namespace).items()):
            if callable(value) or isinstance(value, (staticmethod, classmethod)):
                self.saved[f"{label}.{name}"] = (namespace, name, value)

    def tampered(self) -> list[str]:
        changed = []
        for label, (namespace, name, value) in self.saved.items():
            now = vars(namespace).get(name)
            # torch wraps some of its own functions on first use of torch.compile
            if now is not value and getattr(now, "__wrapped__", None) is not value:
                changed.append(label)
        return changed

    def modes(self) -> list[str]:
        """Torch function and dispatch modes left active: they intercept every op."""
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        return [type(m).__qualname__ for m in _get_current_function_mode_stack() + _get_current_dispatch_mode_stack()]


class ThreadWatch:
    """Python threads the candidate started while it was being run.

    Work finished by a thread after forward returns would escape both the
    check (outputs sampled at return) and the clock."""

    def __init__(self):
        self.baseline = {t.ident for t in threading.enumerate()}

    def new(self) -> list[str]:
        frames = sys._current_frames()
        return sorted(t.name for t in threading.enumerate()
                      if t.ident not in self.baseline and t.is_alive() and not _idle(frames.get(t.ident)))


_WAITS = ("threading.py", "queue.py", os.path.join("concurrent", "futures", "thread.py"))


def _idle(frame) -> bool:
    """A thread parked in a queue or lock wait (torch.compile leaves such a pool) does no work now."""
    return frame is not None and frame.f_code.co_filename.endswith(_WAITS)


_FP32_SETTINGS = (("torch.backends.cuda.matmul", torch.backends.cuda.matmul),
                  ("torch.backends.cudnn.conv", torch.backends.cudnn.conv),
                  ("torch.backends.cudnn.rnn", torch.backends.cudnn.rnn))


# PyTorch's own float32 settings, read when this module is imported (before anything sets them):
# what "eager" means to a user, TF32 in cuDNN convolutions included.
PYTORCH_DEFAULTS = {name: backend.fp32_precision for name, backend in _FP32_SETTINGS}


@contextlib.contextmanager
def pytorch_default_numerics() -> Iterator[None]:
    """PyTorch's default float32 settings for the duration, IEEE float32 again after.

    Only the reference runs so: it is the baseline users know. Correctness is still
    judged against the reference under IEEE float32."""
    for name, backend in _FP32_SETTINGS:
        backend.fp32_precision = PYTORCH_DEFAULTS[name]
    try:
        yield
    finally:
        full_precision()


def at_default_numerics(fn: Callable) -> Callable:
    """`fn`, called under PyTorch's default float32 settings."""
    def call(*args):
        with pytorch_default_numerics():
            return fn(*args)

    return call


def full_precision() -> None:
    """float32 means IEEE float32, for the reference as for candidates.

    PyTorch's default lets cuDNN convolutions run in TF32: such a reference would
    differ from an exact float32 kernel by more than the tolerance, and be timed at
    a precision candidates may not use."""
    for _, backend in _FP32_SETTINGS:
        backend.fp32_precision = "ieee"


def reduced_precision() -> list[str]:
    return [f"{name}.fp32_precision = {backend.fp32_precision!r}" for name, backend in _FP32_SETTINGS
            if backend.fp32_precision != "ieee"]


class L2Watch:
    """L2 persistence the candidate set up: a persisting-L2 limit other than the device's
    own (some GPUs start with one) or an access-policy window on the stream it runs on."""

    def __init__(self, device: torch.device, read: Callable[[int], tuple[int, int]]):
        # `read` gives a stream's (persisting-L2 limit, access-policy window); the engine's timer owns it
        self.read = read
        self.stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
        self.limit = read(self.stream)[0] if self.stream is not None else 0

    def new(self) -> list[str]:
        if self.stream is None:
            return []
        limit, window = self.read(self.stream)
        return ([f"a persisting-L2 limit of {limit} bytes, was {self.limit}"] if limit != self.limit else []) + (
            [f"an access-policy window of {window} bytes on the stream"] if window else [])


def findings(guard: Guard, watch: ThreadWatch, l2: L2Watch) -> dict[str, list[str]]:
    """What each guard saw, by its name in refusals.REFUSALS (a reply carries them; the engine refuses)."""
    seen = {"tampered": guard.tampered, "modes": guard.modes, "precision": reduced_precision,
            "l2_persistence": l2.new, "threads": watch.new}
    return {refusal.name: seen[refusal.name]() for refusal in REFUSALS}
