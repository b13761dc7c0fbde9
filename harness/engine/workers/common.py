"""What every worker role shares: loading files, building models, drawing inputs, the numerics.

The same seed gives the same model and the same inputs in every process on the
same kind of device, so processes agree on a trial by exchanging a seed.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import random
import time
import sys
import traceback
from pathlib import Path
from typing import Any, Optional

import torch
# Imported with the worker, which a spare does ahead of its work: imported in a candidate's (serialize_pch_builds),
# it held up every worker's start by its import, 0.34-0.43 s on an H200 host (Python 3.12, torch 2.11).
from torch.utils import cpp_extension

from ...integrity import distributions
from ...integrity.guards import full_precision
from ...results import to_dict
from ..building.cache import file_lock
from ..building.extensions import key_builds
from ..building.headers import build_failed
from ..building.nogpu import compile_only
from ..processes.protocol import BuildSpec, Reply
from .memory import tensor_bytes


class _Uncached(importlib.machinery.SourceFileLoader):
    """A file's loader that writes no bytecode beside it: a candidate lives in a run's round directory,
    which holds the run's own files alone (no __pycache__), and a problem file's folder is the user's."""

    def set_data(self, path, data, *, _mode=0o666) -> None:
        pass


def import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path, loader=_Uncached(name, path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def serialize_pch_builds(lock_path: str | None) -> None:
    """Let one process at a time check or rebuild torch's shared precompiled header, no process
    wait for another's, and no candidate delete it.

    load_inline(use_pch=True) writes one header file inside torch's install for
    every extension; builds running side by side would otherwise race on it."""
    original = cpp_extension._check_and_build_extension_h_precompiler_headers
    if not lock_path or getattr(original, "serialized", False):
        return

    def locked(*args, **kwargs):
        with file_lock(lock_path, wait=False) as held:
            # held elsewhere: the header is being made (build.start_pch_aside), and this
            # binding compiles sooner without it than the header would be ready
            if held:
                return original(*args, **kwargs)

    locked.serialized = True
    cpp_extension._check_and_build_extension_h_precompiler_headers = locked
    # torch deletes the shared header whenever an extension does not ask for it,
    # which would make the next quick-idiom candidate pay its ~45 s build again
    cpp_extension.remove_extension_h_precompiler_headers = lambda: None


def import_candidate(spec: BuildSpec):
    """Import (and so build) the candidate under the cache entry's lock."""
    serialize_pch_builds(spec.pch_lock)
    compile_only()
    key_builds()
    with file_lock(spec.lock):
        # A build killed mid-way leaves torch's own lock file behind, and the
        # next load_inline would wait on it forever; we hold the entry's lock.
        ext = os.environ.get("TORCH_EXTENSIONS_DIR")
        if ext:
            for stale in Path(ext).glob("*/lock"):
                stale.unlink(missing_ok=True)
        return import_file(spec.candidate, "candidate")


def classify_import_error(exc: BaseException) -> str:
    if build_failed(exc) or "PreCompile Header fail" in str(exc):
        return "compile_error"
    return "import_error"


def error_message(kind: str, exc: BaseException, phase: str = "") -> dict:
    tb = "".join(traceback.format_exception(exc))
    print(tb, file=sys.stderr, flush=True)  # into the log, where first_errors looks
    return to_dict(Reply(error=kind, exception=type(exc).__name__, message=str(exc)[:8000], traceback=tb[-8000:],
                         phase=phase))


# Parameter elements drawn and summed at a time: beside a 4 GB weight, its noise takes 64 MB, not 4 GB.
NOISE_CHUNK = 1 << 24


def randomize_parameters(model: torch.nn.Module, seed: int) -> None:
    """Move every float parameter off its init, the same way in every process.

    A kernel that assumes e.g. LayerNorm's weight=1 and bias=0 then fails."""
    generators: dict[torch.device, torch.Generator] = {}  # drawn where the parameter lives: fast on a GPU
    with torch.no_grad():
        for p in model.parameters():
            if p.dtype.is_floating_point and p.numel():
                gen = generators.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
                parts = p.view(-1).split(NOISE_CHUNK) if p.is_contiguous() else (p,)
                scale = sum(float(part.abs().sum(dtype=torch.float64)) for part in parts) / p.numel() or 1.0
                for part in parts:
                    noise = torch.randn(part.shape, generator=gen, dtype=torch.float32, device=p.device)
                    part.add_(noise.mul_(0.5 * scale).to(dtype=p.dtype))


def copy_parameters(reference: torch.nn.Module, candidate: torch.nn.Module
                    ) -> tuple[list[str], list[Optional[torch.nn.Parameter]]]:
    """Write the reference's parameter values into the candidate's, matched in
    order by shape, or else by element count (a flattened copy of the same
    values). Returns warnings for candidate parameters left unmatched, and per
    reference parameter the candidate's matched to it (None: none was)."""
    available = list(enumerate(reference.parameters()))
    matched: list[Optional[torch.nn.Parameter]] = [None] * len(available)
    warnings = []
    with torch.no_grad():
        for name, p in candidate.named_parameters():
            match = next((i for i, (_, r) in enumerate(available) if r.shape == p.shape), None)
            if match is None:
                match = next((i for i, (_, r) in enumerate(available) if r.numel() == p.numel()), None)
            if match is None:
                warnings.append(f"candidate parameter {name} {tuple(p.shape)} matches no reference "
                                "parameter; it keeps its own values")
                continue
            index, source = available.pop(match)
            p.copy_(source.reshape(p.shape).to(p.dtype))
            matched[index] = p
    return warnings, matched


def build_model(cls, init_args: list, init_seed: int, device: torch.device):
    """cls(*init_args) from a seed, built on `device` itself: a GPU draws a 4 GB Linear's weights
    in milliseconds, a CPU in about ten seconds. A constructor that cannot run there (numpy on a
    new tensor, a CPU generator) is run again on the CPU, from the same seed."""
    torch.manual_seed(init_seed)
    if device.type != "cpu":
        try:
            with torch.device(device):
                return cls(*init_args)
        except Exception:  # noqa: BLE001 - the CPU build below raises what is really wrong
            torch.manual_seed(init_seed)
    return cls(*init_args)


def reference_from(problem, init_args: list, spec, device: torch.device) -> torch.nn.Module:
    """The problem's Model built from the spec's seeds, its parameters moved off their init:
    the same in every process that builds it on the same kind of device (not yet moved there
    where its constructor had to run on the CPU)."""
    reference = build_model(problem.Model, init_args, spec.init_seed, device)
    randomize_parameters(reference, spec.param_seed)
    return reference


def to_device(values: list, device: torch.device) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def inputs_from_seed(problem, device: torch.device, seed: int, distribution: str = "") -> list:
    """The problem's inputs for a seed, made directly on the device, and moved to `distribution` where one is
    named (an audit's: integrity/distributions.py); the same seed gives the same inputs in any process on the
    same kind of device."""
    torch.manual_seed(seed)
    random.seed(seed)  # for problems that draw sizes or scalars with `random`
    with torch.device(device):
        values = problem.get_inputs()
    values = to_device(list(values), device) if isinstance(values, (list, tuple)) else values
    return distributions.moved(values, distribution) if distribution and isinstance(values, list) else values


# Inputs up to this size are drawn into the same tensors call after call while timing.
REUSED_INPUT_BYTES = 8 << 20


class SameTensors:
    """Each timed call's inputs, drawn from its seed and written into the tensors the call before
    got (where they take at most REUSED_INPUT_BYTES, so keeping them costs next to nothing): a
    candidate that caches its output by its input's address or Python id meets the same key with
    other contents, and the re-check of the timed outputs catches the stale output, whatever the
    allocator would have done. (Bigger inputs come back at the same address from a GPU's caching
    allocator anyway, a block of one size being reused for the next.)"""

    def __init__(self, problem, device: torch.device):
        self.problem, self.device, self.kept = problem, device, None

    def __call__(self, seed: int) -> list:
        fresh = inputs_from_seed(self.problem, self.device, seed)
        if self.kept is not None and len(self.kept) == len(fresh) and all(map(_same_layout, self.kept, fresh)):
            with torch.no_grad():
                for old, new in zip(self.kept, fresh):
                    if isinstance(old, torch.Tensor):
                        old.copy_(new)
            return list(self.kept)
        if self.kept is None and tensor_bytes(fresh) <= REUSED_INPUT_BYTES:
            self.kept = fresh
        return fresh


def _same_layout(old, new) -> bool:
    """`new` can be written into `old`: contiguous tensors of one shape, dtype and device, or equal values."""
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        return (old.shape == new.shape and old.dtype == new.dtype and old.device == new.device
                and old.is_contiguous() and new.is_contiguous())
    return not isinstance(old, torch.Tensor) and not isinstance(new, torch.Tensor) and old == new


def in_mode(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """"train" leaves the model in the mode it was constructed in (training, unless the
    problem says otherwise), as KernelBench runs it; "eval" puts it in eval()."""
    return model.eval() if mode == "eval" else model


class State:
    """The buffers of models (BatchNorm's running statistics, counters) as they were when taken.

    Forward may change buffers, and the reference process calls the reference more often
    (at load, for the lint) than the candidate worker calls either model. Restoring this
    before every correctness trial and every re-check, in both processes, makes trial k
    the first call after construction for both models. Timing does not restore: there
    both models are called alike, and a buffer a call updates (running statistics in
    training mode) is one the outputs do not read, in either mode."""

    def __init__(self, *models: torch.nn.Module):
        self.saved = [(b, b.detach().clone()) for m in models for b in m.buffers()]

    def restore(self) -> None:
        with torch.no_grad():
            for buffer, value in self.saved:
                buffer.copy_(value)


class Laps:
    """Wall seconds between named steps, each ended once the device has finished its work (so a
    step's queued kernels count in it, not in the next)."""

    def __init__(self, device: torch.device):
        self.device, self.laps = device, {}
        self._last = time.monotonic()

    def lap(self, step: str) -> None:
        sync(self.device)
        now = time.monotonic()
        self.laps[step] = round(self.laps.get(step, 0.0) + now - self._last, 3)
        self._last = now


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_inputs(values: Any, where: str) -> None:
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{where} must return a list, it returned a {type(values).__name__}")
    for v in values:
        if not (isinstance(v, torch.Tensor) or v is None or isinstance(v, (bool, int, float, str, list, tuple))):
            raise TypeError(f"{where} returned a {type(v).__name__}; inputs must be tensors or plain values")


def settle(device: torch.device) -> None:
    """The same numerics and threads for both models."""
    full_precision()
    # One intra-op thread on CPU: timings that a busy machine barely moves.
    if device.type == "cpu":
        torch.set_num_threads(1)
