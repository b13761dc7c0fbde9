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


_TABLES: dict[str, str] = {}


def dispatch_tables() -> dict[str, str]:
    """Every operator's kernel table, taken once a process, before any candidate code runs (0.1 s on 2
    cores): the fork server takes it for the workers it forks, a worker started afresh as it starts."""
    if not _TABLES:
        _TABLES.update({op: torch._C._dispatch_dump(op) for op in torch._C._dispatch_get_all_op_names()})
    return _TABLES


class DispatchWatch:
    """Kernels registered for operators that existed before candidate code ran, from code outside
    torch's own install: an override of an op the harness runs in this process (drawing inputs,
    copying them, flushing the cache, sampling outputs) would run candidate code there, outside the
    timed window, and one of an op the reference calls would change the reference. torch registers
    kernels of its own lazily (meta kernels, decompositions), from its own files: those are not the
    candidate's. Every kernel table is compared once the candidate is imported (`full`: what its
    extension registered as it loaded); every reply compares the kernels registered from Python since
    (torch.library)."""

    def __init__(self):
        self.tables = dispatch_tables()
        self.ops = set(self.tables)
        self.namespaces = {op.split("::")[0] for op in self.ops}
        self.impls = set(torch.library._impls)
        self.found: list[str] = []

    def _foreign(self, op: str) -> bool:
        """Whether `op`'s kernel table now holds a kernel registered outside torch's install."""
        now = torch._C._dispatch_dump(op)
        if now == self.tables.get(op):
            return False
        was = set(self.tables.get(op, "").splitlines())
        added = [line for line in now.splitlines() if line not in was and "registered at" in line]
        return any(_TORCH_DIR not in line.split("registered at", 1)[1] for line in added)

    def full(self) -> None:
        """Every operator's kernels compared (0.1 s on 2 cores): what an extension registered from C++."""
        self.found = sorted({*self.found, *(op for op in self.ops if self._foreign(op))})

    def new(self) -> list[str]:
        python = {entry.rsplit("/", 1)[0].replace("/", "::", 1) for entry in set(torch.library._impls) - self.impls
                  if entry.split("/", 1)[0] in self.namespaces}
        return sorted({*self.found, *(op for op in python if op in self.ops and self._foreign(op))})


_TORCH_DIR = os.path.dirname(torch.__file__)


class SubreaperWatch:
    """Whether this process still adopts the orphans of what it starts (PR_SET_CHILD_SUBREAPER, set as it
    started): a candidate that turns it off can detach a process out of the tree the harness stops
    while the reference runs and ends with the evaluation."""

    def __init__(self):
        self.was = _subreaper()

    def new(self) -> list[str]:
        return ["PR_SET_CHILD_SUBREAPER"] if self.was and not _subreaper() else []


def _subreaper() -> bool:
    import ctypes

    flag = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    return bool(flag.value)


class ThreadWatch:
    """Python threads the candidate started while it was being run.

    Work finished by a thread after forward returns would escape both the
    check (outputs sampled at return) and the clock."""

    def __init__(self):
        self.baseline = {t.ident for t in threading.enumerate()}

    def new(self) -> list[str]:
        # the frames are not kept in a local: they hold this very frame, and through it (f_back) every
        # caller's locals (a trial's outputs) until the garbage collector finds the cycle
        idle = {ident for ident, frame in sys._current_frames().items() if _idle(frame)}
        return sorted(t.name for t in threading.enumerate()
                      if t.ident not in self.baseline and t.is_alive() and t.ident not in idle)


_WAITS = ("threading.py", "queue.py", os.path.join("concurrent", "futures", "thread.py"))


def _idle(frame) -> bool:
    """A thread parked in a queue or lock wait (torch.compile leaves such a pool) does no work now."""
    return frame is not None and frame.f_code.co_filename.endswith(_WAITS)


_FP32_SETTINGS = (("torch.backends.cuda.matmul", torch.backends.cuda.matmul),
                  ("torch.backends.cudnn.conv", torch.backends.cudnn.conv),
                  ("torch.backends.cudnn.rnn", torch.backends.cudnn.rnn))


# PyTorch's own float32 settings, read when this module is imported (before anything sets them):
# what "eager" means to a user, TF32 in cuDNN convolutions included; and the legacy flags' values,
# which torch keeps beside the new API and checks against it when a program reads them.
PYTORCH_DEFAULTS = {name: backend.fp32_precision for name, backend in _FP32_SETTINGS}
_LEGACY_DEFAULTS = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)


def _legacy_tf32(cudnn: bool, matmul: bool) -> None:
    """The legacy flags set first: they write the new API's settings too, which are set after them,
    and a program reading `torch.backends.cudnn.allow_tf32` finds the two consistent (set the
    other way round, torch raises that cuDNN conv and RNN have different TF32 flags)."""
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = cudnn, matmul


@contextlib.contextmanager
def pytorch_default_numerics() -> Iterator[None]:
    """PyTorch's default float32 settings for the duration, IEEE float32 again after.

    Only the reference runs so: it is the baseline users know. Correctness is still
    judged against the reference under IEEE float32."""
    _legacy_tf32(*_LEGACY_DEFAULTS)
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
    a precision candidates may not use. Lowering it again through either API shows in
    the new one's settings (reduced_precision)."""
    _legacy_tf32(False, False)
    for _, backend in _FP32_SETTINGS:
        backend.fp32_precision = "ieee"


def reduced_precision() -> list[str]:
    return [f"{name}.fp32_precision = {backend.fp32_precision!r}" for name, backend in _FP32_SETTINGS
            if backend.fp32_precision != "ieee"]


def _setter(owner: object, name: str) -> Callable[[object], None]:
    return lambda value: setattr(owner, name, value)


# Process-wide switches a candidate may flip that change how torch runs in its process; not numerics
# (those are refused): algorithm choice, determinism, threads.
_SWITCHES: dict[str, tuple[Callable[[], object], Callable[[object], None]]] = {
    "torch.backends.cudnn.benchmark": (lambda: torch.backends.cudnn.benchmark,
                                       _setter(torch.backends.cudnn, "benchmark")),
    "torch.backends.cudnn.deterministic": (lambda: torch.backends.cudnn.deterministic,
                                           _setter(torch.backends.cudnn, "deterministic")),
    "torch.backends.cudnn.enabled": (lambda: torch.backends.cudnn.enabled, _setter(torch.backends.cudnn, "enabled")),
    "torch.use_deterministic_algorithms": (torch.are_deterministic_algorithms_enabled,
                                           torch.use_deterministic_algorithms),
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        _setter(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction")),
    "torch.set_num_threads": (torch.get_num_threads, torch.set_num_threads),
}


class BackendSwitches:
    """The process-wide switches as they were before candidate code ran: one the candidate flipped in its
    own process is reported (the reference, in a process of its own, runs under the harness's)."""

    def __init__(self):
        self.taken = {name: get() for name, (get, _) in _SWITCHES.items()}

    def flipped(self) -> dict[str, object]:
        return {name: value for name, (get, _) in _SWITCHES.items() if (value := get()) != self.taken[name]}

    def described(self) -> list[str]:
        return [f"{name} = {value!r} (was {self.taken[name]!r})" for name, value in self.flipped().items()]


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


def findings(guard: Guard, watch: ThreadWatch, l2: L2Watch, dispatch: DispatchWatch,
             subreaper: SubreaperWatch) -> dict[str, list[str]]:
    """What each guard saw, by its name in refusals.REFUSALS (a reply carries them; the engine refuses)."""
    seen = {"tampered": guard.tampered, "dispatch": dispatch.new, "modes": guard.modes,
            "precision": reduced_precision, "l2_persistence": l2.new, "threads": watch.new,
            "subreaper": subreaper.new}
    return {refusal.name: seen[refusal.name]() for refusal in REFUSALS}
