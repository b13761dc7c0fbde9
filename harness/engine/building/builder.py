"""The build step of an evaluation: the static check, then a build child that imports (and so
compiles) the candidate into its cache entry. It needs CPU cores, the problem and the cache, not a
device or a reference process, so a pool runs many at once with one Builder per problem."""
from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from ...device import gpu_arch
from ...integrity import static
from ...problem import Problem
from ...results import BuildResult, EvalResult, Verdict, to_dict
from ..findings import BuildFailed, Finding, NotPython, StaticRefusal, Unreadable
from ..options import EvalOptions
from ..phases import Notify, Phase, quiet
from ..processes.child import Child
from ..processes.cores import Cores, split_cores
from ..processes.protocol import BuildDone, BuildSpec
from ..verdicts import Deadline, judged, read_reply, received
from .cache import BuildEntry, first_errors, log_tail
from .extensions import EXTENSION_NAME
from .nogpu import compile_only_env, compiles_only, cuda_home
from .pch import pch_lock_path, start_pch_aside
from .places import generated_files, on_candidate_lines


@dataclass
class Built:
    """A candidate after its build step; `failed` means `result` is already final."""

    path: Path
    entry: Optional[BuildEntry]
    result: EvalResult
    started: float
    failed: bool = False


# The build children running in this process, any builder's (a sweep runs many), each with the thread
# waiting on it: the retimes before an accusation stop them all, so the compiler's load is not on the
# candidate's side alone, and a request cancelled from another thread ends its own (builds_of).
_RUNNING_BUILDS: dict[Child, int] = {}
_BUILDS_LOCK = threading.Lock()


@contextmanager
def paused(children: list[Child]) -> Iterator[None]:
    """These children stopped (SIGSTOP) while the block runs."""
    for child in children:
        child.pause()
    try:
        yield
    finally:
        for child in children:
            child.resume()


def builds_paused():
    """Every build child of this process stopped while the block runs."""
    with _BUILDS_LOCK:
        return paused(list(_RUNNING_BUILDS))


def builds_of(thread: int) -> list[Child]:
    """The build children thread `thread` (its threading.get_ident()) is waiting on."""
    with _BUILDS_LOCK:
        return [child for child, waiting in _RUNNING_BUILDS.items() if waiting == thread]


def import_spec(path: Path, entry: BuildEntry) -> BuildSpec:
    """What a child needs to import (and, the first time, build) a candidate from its cache entry."""
    return BuildSpec(str(path.resolve()), str(entry.lock_path), str(pch_lock_path(entry.cache_dir)))


class Builder:
    """Builds the candidates of one problem under one set of options. By default for this host's
    GPU and on the cores its timing side leaves; a host that builds for others is given the
    timing GPUs' `arch` list and its own `cores`."""

    def __init__(self, problem: Problem, options: EvalOptions, arch: Optional[str] = None,
                 cores: Optional[Cores] = None):
        self.problem, self.options = problem, options
        self.backward = options.backward or problem.backward  # a problem's BACKWARD = True asks for it too
        self.cache = options.resolved_cache()
        self.arch = arch or gpu_arch(options.device, options.gpu)
        self.cores = cores or split_cores(options.device)
        self.limits, self.registry = options.limits(), options.registry()

    def build(self, candidate: str | Path, on_phase: Optional[Notify] = None) -> Built:
        """The static check, then the build; a candidate refused or failed here is `failed`."""
        started = time.monotonic()
        path = Path(candidate)
        tolerances = self.problem.tolerance_table(self.options.atol, self.options.rtol, False)
        result = EvalResult(Verdict.CRASHED, "", problem=self.problem.path, candidate=str(path),
                            model_mode=self.options.model_mode, tolerance=tolerances["float32"],
                            tolerance_given=self.options.atol is not None or self.options.rtol is not None,
                            backward=self.backward)
        try:
            source, report = self._checked(path, result)
        except Finding as found:
            judged(found).fill(result)
            return Built(path, None, result, started, failed=True)
        entry = BuildEntry(self.cache, source, self.arch)
        notify = on_phase or quiet
        notify(Phase.BUILD.doing)
        # On a GPU, torch's header for the binding every load_inline compiles: made aside where it
        # is missing, once per install; a CPU (CI's 2 cores) would give a build's cores to it.
        if self.options.device != "cpu" and "load_inline" in source and not entry.recorded() \
                and start_pch_aside(self.cache, self.cores.build_prefix()):
            notify(f"{Phase.BUILD.doing} (torch's precompiled header made aside, once per install)")
        try:
            # nothing to compile: the worker's own import is the whole build
            result.build = (BuildResult(ok=True, seconds=0.0, key=entry.key) if "no_kernel" in report.codes()
                            else self._compile(path, source, entry))
            result.phase_seconds[Phase.BUILD.value] = result.build.seconds  # 0 for a cached build
        except Finding as found:
            judged(found).fill(result)
            result.seconds = time.monotonic() - started
            return Built(path, entry, result, started, failed=True)
        return Built(path, entry, result, started)

    def _checked(self, path: Path, result: EvalResult) -> tuple[str, static.StaticReport]:
        """The candidate's source and the static check's report; raises what makes a build pointless or
        refused."""
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise Unreadable(str(path), str(exc)) from None
        result.candidate_hash = hashlib.sha256(source.encode()).hexdigest()
        report = static.analyse(source, self.problem.source)
        result.details["static"] = to_dict(report)  # for a person; no code reads it back
        if unparsed := static.syntax_error(report):  # a build could only end in a failed import
            raise NotPython(unparsed)
        refusal = static.static_verdict(report, self.options.policy)
        if refusal:
            raise StaticRefusal(refusal)
        result.warnings.extend(static.warnings(report))
        return source, report

    def _compile(self, path: Path, source: str, entry: BuildEntry) -> BuildResult:
        cached = entry.recorded()
        if cached and cached.ok:
            return BuildResult(ok=True, seconds=0.0, cached=True, key=entry.key, log_path=cached.log_path,
                               extensions=cached.extensions, headers=cached.headers)
        if cached:  # a compile error belongs to the source: the same file fails the same way again
            raise BuildFailed(BuildResult(False, 0.0, cached=True, key=entry.key, log_path=cached.log_path,
                                          first_errors=cached.first_errors, headers=cached.headers))
        started = time.monotonic()
        entry.dir.mkdir(parents=True, exist_ok=True)
        env = {**self.options.child_env(entry), **self.cores.build_env(),
               **(compile_only_env(entry.cache_dir, cuda_home()) if compiles_only(entry.arch) else {})}
        child = Child("build", entry.log_path, env=env,
                      limits=self.limits, registry=self.registry, forked=self.options.forked())
        limit = self.options.build_timeout
        with _BUILDS_LOCK:
            _RUNNING_BUILDS[child] = threading.get_ident()
        try:
            child.send(to_dict(import_spec(path, entry)))
            done = read_reply(BuildDone, received(child, Deadline(started + limit, limit, "the build timeout"),
                                                  "building"))
        finally:
            with _BUILDS_LOCK:
                _RUNNING_BUILDS.pop(child, None)
            child.stop()
        seconds = time.monotonic() - started
        if done.error:
            log = log_tail(entry.log_path)
            errors = first_errors(on_candidate_lines(log, path.name, source, generated_files(log, entry.extensions)))
            failed = BuildResult(False, seconds, key=entry.key, log_path=str(entry.log_path), first_errors=errors,
                                 headers=done.headers)
            if done.error == "compile_error" and errors:
                entry.record(failed)
            raise BuildFailed(failed, done)
        # the child names its extensions' directories: only names of the keyed form are kept
        extensions = [key for key in done.extensions if isinstance(key, str) and EXTENSION_NAME.fullmatch(key)]
        record = BuildResult(True, seconds, cached=not done.compiled, key=entry.key, log_path=str(entry.log_path),
                             extensions=extensions, headers=done.headers)
        entry.record(record)
        return record
