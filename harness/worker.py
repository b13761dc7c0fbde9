"""The child processes: `python -m harness.worker ROLE FD`.

Roles:
- build: imports the candidate once (load_inline compiles at import) and reports.
- candidate: imports the built candidate, runs it on the inputs it is handed,
  and times it interleaved with the reference on inputs of its own.
- oracle: builds the reference, draws trial inputs from fresh seeds, keeps the
  reference outputs, and compares what the candidate returned. It never runs
  candidate code, so the reference outputs never live where the candidate runs.

The first message on FD is the spec (from the harness); every later message
from a child is JSON plus raw tensor bytes (see channel.py).
"""
from __future__ import annotations

import faulthandler
import importlib.util
import os
import platform
import random
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

if os.environ.get("HARNESS_START_NICE"):
    # a spare worker: import torch below without taking CPU from a timing in progress
    os.nice(int(os.environ["HARNESS_START_NICE"]))

import torch  # noqa: E402

from . import channel, check, lint, roofline, timing
from .build import file_lock
from .results import CheckResult, to_dict

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


GUARD = Guard()
for _label, _namespace in (("torch", torch), ("torch.nn.functional", torch.nn.functional),
                           ("torch.Tensor", torch.Tensor), ("torch.cuda", torch.cuda),
                           ("torch.cuda.Event", torch.cuda.Event), ("time", timing.time),
                           ("harness.timing", timing), ("harness.timing.Clock", timing.Clock),
                           ("harness.channel", channel), ("harness.check", check)):
    GUARD.take(_label, _namespace)
# the functions this module calls after candidate code has run, kept unswappable
_send, _time_interleaved = channel.send, timing.time_interleaved


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

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
        self.limit = timing.l2_persistence(self.stream)[0] if self.stream is not None else 0

    def new(self) -> list[str]:
        if self.stream is None:
            return []
        limit, window = timing.l2_persistence(self.stream)
        return ([f"a persisting-L2 limit of {limit} bytes, was {self.limit}"] if limit != self.limit else []) + (
            [f"an access-policy window of {window} bytes on the stream"] if window else [])


def integrity(watch: "ThreadWatch", l2: L2Watch) -> dict:
    return {"tampered": GUARD.tampered(), "threads": watch.new(), "modes": GUARD.modes(),
            "precision": reduced_precision(), "l2_persistence": l2.new()}


def import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def serialize_pch_builds(lock_path: str | None) -> None:
    """Let one process at a time check or rebuild torch's shared precompiled header,
    and let no candidate delete it.

    load_inline(use_pch=True) writes one header file inside torch's install for
    every extension; builds running side by side would otherwise race on it."""
    from torch.utils import cpp_extension

    original = cpp_extension._check_and_build_extension_h_precompiler_headers
    if not lock_path or getattr(original, "serialized", False):
        return

    def locked(*args, **kwargs):
        with file_lock(lock_path):
            return original(*args, **kwargs)

    locked.serialized = True
    cpp_extension._check_and_build_extension_h_precompiler_headers = locked
    # torch deletes the shared header whenever an extension does not ask for it,
    # which would make the next quick-idiom candidate pay its ~45 s build again
    cpp_extension.remove_extension_h_precompiler_headers = lambda: None


def import_candidate(spec: dict):
    """Import (and so build) the candidate under the cache entry's lock."""
    serialize_pch_builds(spec.get("pch_lock"))
    with file_lock(spec.get("lock")):
        # A build killed mid-way leaves torch's own lock file behind, and the
        # next load_inline would wait on it forever; we hold the entry's lock.
        ext = os.environ.get("TORCH_EXTENSIONS_DIR")
        if ext:
            for stale in Path(ext).glob("*/lock"):
                stale.unlink(missing_ok=True)
        return import_file(spec["candidate"], "candidate")


def classify_import_error(exc: BaseException) -> str:
    text = str(exc)
    if "Error building extension" in text or "PreCompile Header fail" in text:
        return "compile_error"
    return "import_error"


def error_message(kind: str, exc: BaseException, **extra) -> dict:
    tb = "".join(traceback.format_exception(exc))
    print(tb, file=sys.stderr, flush=True)  # into the log, where first_errors looks
    return {"error": kind, "exception": type(exc).__name__, "message": str(exc)[:8000],
            "traceback": tb[-8000:], **extra}


def randomize_parameters(model: torch.nn.Module, seed: int) -> None:
    """Move every float parameter off its init, the same way in every process.

    A kernel that assumes e.g. LayerNorm's weight=1 and bias=0 then fails."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dtype.is_floating_point and p.numel():
                scale = float(p.detach().abs().mean()) or 1.0
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.5 * scale
                p.add_(noise.to(device=p.device, dtype=p.dtype))


def copy_parameters(reference: torch.nn.Module, candidate: torch.nn.Module) -> list[str]:
    """Write the reference's parameter values into the candidate's, matched in
    order by shape, or else by element count (a flattened copy of the same
    values). Returns warnings for candidate parameters left unmatched."""
    available = list(reference.parameters())
    warnings = []
    with torch.no_grad():
        for name, p in candidate.named_parameters():
            match = next((i for i, r in enumerate(available) if r.shape == p.shape), None)
            if match is None:
                match = next((i for i, r in enumerate(available) if r.numel() == p.numel()), None)
            if match is None:
                warnings.append(f"candidate parameter {name} {tuple(p.shape)} matches no reference "
                                "parameter; it keeps its own values")
                continue
            p.copy_(available.pop(match).reshape(p.shape).to(p.dtype))
    return warnings


def build_model(cls, init_args: list, init_seed: int):
    torch.manual_seed(init_seed)
    return cls(*init_args)


def to_device(values: list, device: torch.device) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def inputs_from_seed(problem, device: torch.device, seed: int) -> list:
    """The problem's inputs for a seed, made directly on the device; the same
    seed gives the same inputs in any process on the same kind of device."""
    torch.manual_seed(seed)
    random.seed(seed)  # for problems that draw sizes or scalars with `random`
    with torch.device(device):
        values = problem.get_inputs()
    return to_device(list(values), device) if isinstance(values, (list, tuple)) else values


def new_seed() -> int:
    """From the OS, so no process can predict it."""
    return int.from_bytes(os.urandom(8), "little") >> 1


def checksum(values: list) -> list:
    """A cheap digest of inputs, to confirm two processes made the same ones."""
    return [float(v.detach().double().sum()) if isinstance(v, torch.Tensor) else repr(v) for v in values]


SAMPLED_ELEMENTS = 2048


def sample_positions(numel: int, key: int, device: torch.device) -> torch.Tensor:
    count = min(numel, SAMPLED_ELEMENTS)
    if count == numel:
        return torch.arange(numel, device=device)
    generator = torch.Generator(device=device).manual_seed(key)
    return torch.randint(0, numel, (count,), generator=generator, device=device)


class TimedOutputs:
    """Samples of every timed output, for the reference process to re-check.

    Positions are drawn after the call returns, from a key nobody knew before,
    so only an output that is right everywhere passes reliably."""

    def __init__(self, device: torch.device):
        self.device = device
        self.samples: list[dict] = []
        self.values: list[list[torch.Tensor]] = []

    def observe(self, seed: int, output: Any) -> None:
        key = int.from_bytes(os.urandom(8), "little") >> 1
        outputs, meta, values = check.as_list(output), [], []
        for i, out in enumerate(outputs):
            if type(out) is not torch.Tensor:
                meta.append({"unsupported": type(out).__qualname__})
                continue
            flat = out.detach().reshape(-1)
            meta.append({"shape": list(out.shape), "dtype": str(out.dtype).removeprefix("torch.")})
            values.append(flat[sample_positions(flat.numel(), key + i, flat.device)].to(torch.float64))
        self.samples.append({"seed": seed, "key": key, "outputs": meta})
        self.values.append(values)

    def message(self) -> tuple[dict, list]:
        """One tensor per output position: its samples stacked, as few descriptors as possible."""
        tensors = []
        if self.values and all(len(v) == len(self.values[0]) for v in self.values):
            tensors = [torch.cat([v[i].reshape(-1).cpu() for v in self.values])
                       for i in range(len(self.values[0]))]
        return {"timed": self.samples}, tensors


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- roles -------------------------------------------------------------------

def build_role(conn, spec: dict) -> None:
    try:
        module = import_candidate(spec)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a candidate is a result too
        channel.send(conn, error_message(classify_import_error(exc), exc))
        return
    ok = isinstance(getattr(module, "ModelNew", None), type)
    channel.send(conn, {"ok": ok} if ok else {"error": "import_error", "exception": "",
                                               "message": "the file defines no class ModelNew"})


def check_inputs(values: Any, where: str) -> None:
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{where} must return a list, it returned a {type(values).__name__}")
    for v in values:
        if not (isinstance(v, torch.Tensor) or v is None or isinstance(v, (bool, int, float, str, list, tuple))):
            raise TypeError(f"{where} returned a {type(v).__name__}; inputs must be tensors or plain values")


def problem_roofline(problem, device: torch.device, device_name: str, cache_dir: str | None) -> dict:
    """The bytes and flops the problem declares, and the device's measured peaks."""
    declared = {name: int(getattr(problem, f"roofline_{name}")()) for name in ("bytes", "flops")
                if callable(getattr(problem, f"roofline_{name}", None))}
    if not declared:
        return {}
    peaks = roofline.cached_peaks(cache_dir, device_name) if cache_dir else None
    if peaks is None:
        peaks = roofline.measure_peaks(device, device_name)
        if cache_dir:
            roofline.store_peaks(cache_dir, peaks)
    return {"roofline": declared, "peaks": to_dict(peaks)}


def oracle_role(conn, spec: dict) -> None:
    device = torch.device(spec["device"])
    tolerances = spec["tolerances"]
    settle(device)
    try:
        problem = import_file(spec["problem"], "problem")
        init_args = list(problem.get_init_inputs())
        check_inputs(init_args, "get_init_inputs()")
        reference = build_model(problem.Model, init_args, spec["init_seed"])
        randomize_parameters(reference, spec["param_seed"])
        reference = reference.to(device).eval()
        compiled = None
        probe = new_seed()
        check_inputs(inputs_from_seed(problem, device, probe), "get_inputs()")
        # Trials hand the worker a seed; that only works if a seed reproduces the inputs.
        reproducible = checksum(inputs_from_seed(problem, device, probe)) == checksum(
            inputs_from_seed(problem, device, probe))
    except BaseException as exc:  # noqa: BLE001
        channel.send(conn, error_message("problem_error", exc))
        return
    info = {"ready": True, "device_name": platform.processor() or platform.machine(), "capability": "",
            "reproducible": reproducible}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(device_name=props.name, capability=f"{props.major}.{props.minor}")
    info["warnings"] = []
    try:
        info.update(problem_roofline(problem, device, info["device_name"], spec.get("cache_dir")))
    except Exception as exc:  # noqa: BLE001 - a broken declaration is reported, not fatal
        info["warnings"].append(f"the problem's roofline declaration failed: {type(exc).__name__}: {exc}")
    try:
        info["warnings"] += lint.lint_reference(reference, lambda: inputs_from_seed(problem, device, new_seed()),
                                                tolerances=tolerances)
    except Exception as exc:  # noqa: BLE001
        info["warnings"].append(f"the problem lint could not run: {type(exc).__name__}: {exc}")
    channel.send(conn, info)
    outputs = None
    while True:
        # a candidate's outputs may not be much bigger than the reference's (plus the timed samples)
        limit = 4 * sum(t.nbytes for t in check.as_list(outputs) if isinstance(t, torch.Tensor)) + (64 << 20)
        try:
            message = channel.recv(conn, max_bytes=limit, pin=device.type == "cuda")
        except channel.ChannelError as exc:
            # what the candidate sent was malformed: that is its failure, not ours
            channel.send(conn, {"check": to_dict(CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"]))})
            continue
        cmd = message.header.get("cmd")
        if cmd == "make_trial":
            # The worker makes the same inputs from the seed: 8 bytes travel, not the tensors.
            seed = new_seed()
            try:
                inputs = inputs_from_seed(problem, device, seed)
                check_inputs(inputs, "get_inputs()")
                digest = checksum(inputs)
                with torch.no_grad():
                    outputs = reference(*inputs)
                sync(device)
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message("problem_error", exc))
                return
            channel.send(conn, {"seed": seed, "checksum": digest})
        elif cmd == "compare":
            tree, candidate = message.header.get("outputs"), None
            try:
                candidate = channel.unflatten(tree, message.tensors)
                result = check.compare(outputs, candidate, channel.devices(tree),
                                       lambda dtype: tuple(tolerances.get(dtype, tolerances["default"])))
            except channel.ChannelError as exc:
                result = CheckResult(False, reasons=[f"its outputs are unreadable: {exc}"])
            del message, candidate
            channel.send(conn, {"check": to_dict(result)})
        elif cmd == "time_reference":
            # The reference alone, in a process no candidate touched: the yardstick
            # for the reference timed beside the candidate.
            make_inputs = lambda seed: inputs_from_seed(problem, device, seed)  # noqa: E731
            entries = {"reference": timing.Timed(make_inputs, reference)}
            try:
                if message.header.get("compile_baseline"):
                    if compiled is None:  # compiled once per oracle
                        compiled = torch.compile(reference)
                    entries["compiled"] = timing.Timed(make_inputs, compiled)
                results = timing.time_interleaved(entries, device, timing.StopRule(**message.header["rule"]))
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message("problem_error", exc))
                return
            channel.send(conn, {"timings": {k: to_dict(v) for k, v in results.items()}})
        elif cmd == "verify_timed":
            result = verify_timed(problem, reference, device, message, tolerances)
            del message
            channel.send(conn, {"check": to_dict(result)})
        else:
            return


def verify_timed(problem, reference, device: torch.device, message: channel.Message,
                 tolerances: dict) -> CheckResult:
    """Re-check the sampled outputs of every timed call against the reference
    on the same inputs, regenerated here from their seeds."""
    samples = message.header.get("timed") or []
    offsets = [0] * len(message.tensors)
    result = CheckResult(True, trials=len(samples))
    failures = 0
    for number, sample in enumerate(samples, 1):
        with torch.no_grad():
            refs = check.as_list(reference(*inputs_from_seed(problem, device, int(sample["seed"]))))
        reasons = []
        metas = sample.get("outputs") or []
        if len(metas) != len(refs) or len(message.tensors) != len(refs):
            reasons.append(f"it returned {len(metas)} output(s) where the reference returns {len(refs)}")
        for i, (ref, meta) in enumerate(zip(refs, metas)):
            if reasons:
                break
            if "unsupported" in meta:
                reasons.append(f"output {i} is a {meta['unsupported']}, expected a plain torch.Tensor")
                break
            if meta.get("shape") != list(ref.shape) or meta.get("dtype") != str(ref.dtype).removeprefix("torch."):
                reasons.append(f"output {i} has shape {meta.get('shape')} and dtype {meta.get('dtype')}")
                break
            flat = ref.reshape(-1)
            positions = sample_positions(flat.numel(), int(sample["key"]) + i, flat.device)
            got = message.tensors[i][offsets[i]:offsets[i] + positions.numel()].to(flat.device)
            offsets[i] += positions.numel()
            atol, rtol = tolerances.get(str(ref.dtype).removeprefix("torch."), tolerances["default"])
            want = flat[positions].to(torch.float64)
            if got.numel() != want.numel() or not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
                reasons.append(f"output {i} differs from the reference")
        if reasons:
            failures += 1
            if result.passed:
                result.passed, result.failed_trial, first = False, number, "; ".join(reasons)
    if failures:
        result.mismatch_share = failures / max(1, len(samples))
        result.reasons.append(f"{failures} of {len(samples)} timed calls returned wrong outputs "
                              f"(first, call {result.failed_trial}: {first})")
    return result


def settle(device: torch.device) -> None:
    """The same numerics and threads for both models."""
    full_precision()
    # One intra-op thread on CPU: timings that a busy machine barely moves.
    if device.type == "cpu":
        torch.set_num_threads(1)


def candidate_role(conn, spec: dict) -> None:
    os.environ.update(spec.get("env", {}))  # this candidate's cache entry; the process may be a spare
    device = torch.device(spec["device"])
    settle(device)
    problem = import_file(spec["problem"], "problem")
    GUARD.take("problem", problem)
    GUARD.take("problem.Model", problem.Model)
    for cls in vars(torch.nn).values():
        # nn.Module itself is left out: torch.compile wraps its __init__ for its own bookkeeping
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and cls is not torch.nn.Module:
            GUARD.take(f"torch.nn.{cls.__name__}", cls)
    watch = ThreadWatch()  # before the import: a thread started there may finish work later too
    l2 = L2Watch(device)
    try:
        module = import_candidate(spec)
    except BaseException as exc:  # noqa: BLE001
        channel.send(conn, error_message(classify_import_error(exc), exc))
        return
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
        channel.send(conn, {"error": "import_error", "exception": "",
                            "message": "the file defines no ModelNew subclass of torch.nn.Module"})
        return
    init_args = list(problem.get_init_inputs())
    try:
        reference = build_model(problem.Model, init_args, spec["init_seed"])
        randomize_parameters(reference, spec["param_seed"])
        candidate = build_model(model_new, init_args, spec["init_seed"])
        warnings = copy_parameters(reference, candidate)
        reference, candidate = reference.to(device).eval(), candidate.to(device).eval()
    except BaseException as exc:  # noqa: BLE001
        channel.send(conn, error_message("runtime_error", exc, phase="constructing ModelNew"))
        return
    channel.send(conn, {"ready": True, "warnings": warnings, **integrity(watch, l2)})
    while True:
        message = channel.recv(conn)
        cmd = message.header.get("cmd")
        if cmd == "trial":
            inputs = inputs_from_seed(problem, device, int(message.header["seed"]))
            digest = checksum(inputs)  # taken before the candidate sees them
            pristine = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
            try:
                with torch.no_grad():
                    outputs = candidate(*inputs)
                sync(device)
                changed = [i for i, (a, b) in enumerate(zip(inputs, pristine))
                           if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
                tensors: list = []
                tree = channel.flatten(outputs, tensors)
                sync(device)
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message("runtime_error", exc, phase="running ModelNew"))
                return
            _send(
                conn, {"outputs": tree, "inputs_changed": changed, "checksum": digest, **integrity(watch, l2)},
                tensors)
        elif cmd == "time":
            make_inputs = lambda seed: inputs_from_seed(problem, device, seed)  # noqa: E731
            observed = TimedOutputs(device)
            entries = {"candidate": timing.Timed(make_inputs, candidate, observed.observe),
                       "reference": timing.Timed(make_inputs, reference)}
            try:
                rule = timing.StopRule(**message.header.get("rule", {}))
                results = _time_interleaved(entries, device, rule)
            except BaseException as exc:  # noqa: BLE001
                channel.send(conn, error_message("runtime_error", exc, phase="timing"))
                return
            header, tensors = observed.message()
            _send(
                conn, {"timings": {k: to_dict(v) for k, v in results.items()}, **integrity(watch, l2), **header},
                tensors)
        else:
            return


ROLES = {"build": build_role, "candidate": candidate_role, "oracle": oracle_role}


FILE_SIZE_LIMIT = 16 << 30


def confine(role: str) -> None:
    """Limits for processes that run candidate code."""
    import ctypes
    import resource

    # Orphans of anything started here are re-parented to this process, not to
    # init, so the harness can find and kill the whole tree.
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if role == "oracle":
        return
    try:  # under memory pressure the kernel kills this process first, not the harness
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def main(argv: list[str]) -> None:
    role, fd = argv[1], int(argv[2])
    faulthandler.enable()  # a segfault leaves a Python stack in the log
    confine(role)
    conn = channel.Channel.from_fd(fd)
    spec = channel.recv(conn).header
    if os.environ.get("HARNESS_START_NICE"):
        try:  # started as a spare at low priority; now it has work (raising it back needs root)
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except OSError:
            pass
    ROLES[role](conn, spec)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate extensions and CUDA can hang or crash in it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
