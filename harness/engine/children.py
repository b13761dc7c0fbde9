"""The processes of one problem on one device: the reference process, which runs no
candidate code, and a fresh worker per candidate, with a spare importing torch ahead and the next
candidate staged. Talking to them (a reply read as the protocol's type, a failure turned into the
problem's error or the candidate's verdict), moving both to another shape, and the device's lock."""
from __future__ import annotations

import json
import os
import re
import time
from contextlib import ExitStack, contextmanager
from typing import Iterator, Optional

from ..files import new_seed
from ..problem import Problem, ProblemError
from ..results import EvalResult, from_dict, shape_label, to_dict
from .building.builder import Built, import_spec, paused
from .findings import Finding, ReferenceOutOfMemory
from .options import EvalOptions
from .phases import Notify, quiet
from .processes.child import Child, ChildBrokeProtocol, ChildDied, ChildTimeout, endings_done, prune_logs
from .processes.cores import START_NICE_ENV, WARM_DEVICE_ENV, WARM_LOCK_ENV, split_cores
from .processes.device_lock import DeviceLock, device_key
from .processes.gates import gate, list_staged, staged_on, unstage
from .processes.environment import collect_environment
from .processes.footprint import DoesNotFit, fit_refusal
from .processes.protocol import (CandidateReady, CandidateSpec, Command, Linted, ReferenceHolding, ReferenceReady,
                                 ReferenceSpec, Reply, Request, ShapeSet)
from .verdicts import R, Deadline, after, child_error, read_reply, received, refuse_on_guards

MANY_CORES = (os.cpu_count() or 1) >= 8
REFERENCE_START_S = 120.0
DEVICE_WAIT_S = 24 * 3600.0  # the most a prepared reference waits for another's timing to end
# Children.device_lock's waits in the ledger (Children.waits), in the order they come: for this process's
# other work on the device (the gate: a sweep's previous problem's other shapes), for the lock (another
# timing, the next problem's load, a spare's first calls), for processes ended before it
DEVICE_WAITS = ("waiting for this process's other work", "waiting for the device's lock",
                "waiting for processes ended earlier")


class NoBackward(ProblemError):
    """Under --backward: the problem's outputs have no gradient (argmax), so there is no backward to check."""


class Children:
    """The reference process, kept across candidates, and each candidate's worker."""

    def __init__(self, problem: Problem, options: EvalOptions, backward: bool, keep_spare: bool = True):
        self.problem, self.options, self.backward = problem, options, backward
        self.cache = options.resolved_cache()
        self.logs = options.logs()
        prune_logs(self.logs)
        self.registry, self.limits = options.registry(), options.limits()
        # this GPU's timing processes on cores of their own, builds on the rest
        self.cores = split_cores(options.device, gpu=options.gpu)
        self.seeds = {"init_seed": new_seed(), "param_seed": new_seed()}
        self.reference: Optional[Child] = None
        self.reference_info = ReferenceReady()
        self.problem_warnings: list[str] = []
        self._linted = False  # whether the reference process in place has run the problem lint (lint_problem)
        self.environment = None
        self.memory: dict[str, dict[str, int]] = {}  # peak bytes by process, as their replies said
        self.keep_spare = keep_spare  # for evaluators that will see more than one candidate
        self._spare: Optional[Child] = None
        # the next candidate, importing ahead, and the most device memory its build may take then (stage)
        self._staged: Optional[tuple[Built, Child, int]] = None
        self._blank_reference: Optional[Child] = None  # a reference process importing, not yet told the problem
        self._spawned = 0
        self.current: Optional[Child] = None  # the worker in flight
        # seconds waited on each step's replies (step_name) since the evaluation in flight began: where
        # its phases' seconds went, for its record
        self.waits: dict[str, float] = {}
        self._closed = False  # after close, a timing thread still running starts no process

    def close(self) -> None:
        """Every process of this problem ended and gone; never beside a timing of this process (untimed): a
        process's exit frees its device memory and context, work that landed in a sweep's next timing."""
        self._closed = True
        with self.untimed():
            self.end()
            endings_done()

    def end(self) -> None:
        """Every process of this problem ended (a problem's failure, or close)."""
        if self.current:
            self.current.kill()
        if self._spare:
            self._spare.kill()
            self._spare = None
        if self._staged:
            unstage(self.device_key, self._staged[1])
            self._staged[1].kill()
            self._staged = None
        if self._blank_reference:
            self._blank_reference.kill()
            self._blank_reference = None
        if self.reference:
            self.reference.stop()
            self.reference = None

    # -- the reference process -------------------------------------------------

    def start_reference(self, hold_device: bool = False) -> None:
        """Start the reference process; a broken problem raises ProblemError. `hold_device`: it
        loads the problem holding the device's lock, waiting (its imports done) for any timing there."""
        if self.reference and self.reference.alive():
            return
        blank, self._blank_reference = self._blank_reference, None
        self.reference = blank if blank and blank.alive() else self._spawn_reference()
        self.reference.send(to_dict(ReferenceSpec(self.problem.path, self.options.device, self.tolerances(),
                                                  str(self.cache), model_mode=self.options.model_mode,
                                                  device_key=self.device_key if hold_device else "",
                                                  lock_owner=os.getpid(),
                                                  backward=self.backward,
                                                  grad_tolerances=self.tolerances(gradients=True),
                                                  grad_rounding=self._grad_rounding(),
                                                  **self.seeds)))
        if hold_device:
            self.reference_says(after(DEVICE_WAIT_S, "the longest wait for another timing"), ReferenceHolding,
                                "waiting for the device")
        # the reference's own start (torch's import, the problem's lint) is no candidate's run: a short
        # --run-timeout meant for candidates must not fail it on a busy machine
        start = max(self.options.run_timeout, REFERENCE_START_S)
        ready = self.reference_says(after(start, "the longer of the run timeout and the reference's start limit"),
                                    ReferenceReady, "loading the problem")
        self.reference_info = ready
        self.problem_warnings, self._linted = list(ready.warnings), False
        if self.backward and ready.no_backward:
            self.end()
            raise NoBackward(f"Problem file {self.problem.path}: {ready.no_backward}.")
        refusal = fit_refusal(self.problem, ready, self.options.device, self.options.memory_limit,
                              self.limits.host_memory)
        if refusal:
            self.end()
            raise DoesNotFit(refusal)
        self.environment = collect_environment(self.options.device, ready.device_name, ready.capability)

    @property
    def lint_due(self) -> bool:
        """Whether the reference process in place has yet to say the problem lint's warnings."""
        return not self._linted

    def lint_problem(self) -> list[str]:
        """The problem lint's warnings (integrity/lint.py), asked of the reference process once: after the
        problem's first check (or its first verdict, where the check ended it), off the load that every
        problem's first check waits for, and never beside a timing of this process (untimed), as the trials.
        Where that check's first trials were its draws (checking/trials.py's lint_in_trials), the reference
        process says them at once. A lint that fails says so in its warning."""
        if self._linted or not (self.reference and self.reference.alive()):
            return []
        self._linted = True
        try:
            with self.untimed():
                self.reference.send(to_dict(Request(Command.LINT)))
                linted = self.reference_says(self.run_deadline(), Linted, "linting the problem")
        except (ProblemError, Finding) as exc:
            said = [f"the problem lint could not run: {exc}"]
        else:
            self.reference_info.load_seconds["lint"] = linted.seconds
            said = linted.warnings
        self.problem_warnings += said
        return said

    def tolerances(self, gradients: bool = False) -> dict[str, list[float]]:
        return self.problem.tolerance_table(self.options.atol, self.options.rtol, gradients)

    def _grad_rounding(self) -> bool:
        """The gradients' atol gains the reference's own rounding unless a tolerance was given."""
        p, o = self.problem, self.options
        return self.backward and all(t is None for t in (p.grad_atol, p.grad_rtol, o.atol, o.rtol))

    def _spawn_reference(self, spare: bool = False) -> Child:
        log = self.logs / f"reference-{self.problem.name}-{os.getpid()}-{self.options.gpu or 0}.log"
        return Child("reference", log, env=self._start_env(spare, first_calls=True), registry=self.registry,
                     forked=self.options.forked())

    def spawn(self) -> None:
        """Start the reference process and a spare worker for the first candidate without the
        problem, at low priority: they import torch (seconds) but hold no GPU memory until
        start_reference and the first candidate (none where that one is staged already). A sweep
        starts a problem so while others are timed."""
        if self._spare is None and self._staged is None:
            self._spare = self._spawn_worker(spare=True)
        if not (self.reference and self.reference.alive()) and self._blank_reference is None:
            self._blank_reference = self._spawn_reference(spare=True)

    def prepare(self) -> None:
        """Start the reference process, and a spare worker importing beside it for the first
        candidate (a sweep does this for the next problem while the current one is checked).
        Both import torch at low priority; the reference then loads its problem holding the
        device (the reference process takes its lock), so its calls never run beside a timing there."""
        self.spawn()
        self.start_reference(hold_device=True)

    def reference_says(self, deadline: Deadline, kind: type[R], doing: str) -> R:
        """The reference process's next reply, to the step it is `doing`. Its failure is the problem's,
        and ends the process, with a message naming the step, its limit and the time spent; running
        out of memory is the device's limit."""
        log = self.reference.log_path
        try:
            with self._waiting(doing):
                reply = from_dict(kind, self.reference.recv(deadline.at).header)
        except ChildTimeout:
            self.end()
            raise ProblemError(f"Problem file {self.problem.path}: the reference process was still {doing} "
                               f"after {deadline.limit:.0f} s ({deadline.basis}) and was stopped; see {log}.") from None
        except ChildDied as exc:
            self.end()
            raise ProblemError(f"Problem file {self.problem.path}: the reference process {exc.status} while "
                               f"{doing}, {deadline.spent:.1f} s into it; see {log}.") from None
        except ChildBrokeProtocol as exc:
            self.end()
            raise ProblemError(f"Problem file {self.problem.path}: while {doing}, the reference process wrote "
                               f"something that is not a message of the protocol ({exc}); see {log}.") from None
        if reply.error == "out_of_memory":
            self.reference.stop()
            self.reference = None
            first = str(reply.message).strip().splitlines()[:1]
            if kind in (ReferenceHolding, ReferenceReady):
                raise DoesNotFit(f"Problem file {self.problem.path}: the reference ran out of memory while it was "
                                 f"being loaded and linted ({''.join(first)}); the problem does not fit the "
                                 "device's free memory. Make get_inputs() smaller, or free the device.")
            raise ReferenceOutOfMemory(doing, "".join(first), reply.exception)
        if reply.error:
            self.end()
            raise ProblemError(f"Problem file {self.problem.path} could not be used: "
                               f"{reply.exception}: {reply.message}".strip())
        _note_memory(self.memory.setdefault("reference", {}), reply)
        return reply

    # -- the candidate's worker -------------------------------------------------

    def _spawn_worker(self, spare: bool = False) -> Child:
        if self._closed:
            raise ChildDied("was not started: the evaluator is closed")
        self._spawned += 1
        # named for the problem too: a process with several problems' pools (a sweep, a batch) numbers
        # each pool's workers from 1, and two logs of one name would interleave
        log = self.logs / f"worker-{self.problem.name}-{os.getpid()}-{self.options.gpu or 0}-{self._spawned}.log"
        return Child("candidate", log, env=self._start_env(spare), limits=self.limits, registry=self.registry,
                     forked=self.options.forked())

    def _take_worker(self) -> Child:
        """The spare worker if one is ready, else a fresh one."""
        spare, self._spare = self._spare, None
        return spare if spare and spare.alive() else self._spawn_worker()

    def keep_a_spare(self) -> None:
        """A worker importing torch now, for the candidate after the next."""
        if self.keep_spare and MANY_CORES:
            self._spare = self._spare or self._spawn_worker(spare=True)

    def stage(self, built: Built, beside_cap: int = 0) -> None:
        """Start importing the candidate `run` will see next, while this one is checked (a sweep also
        stages the next problem's first candidate during the current problem's check).

        Its worker is stopped while any candidate of this process is timed on the device
        (holding_device), so it never competes with a measurement. `beside_cap`: staged beside
        another problem's evaluation, whose memory is not this one's to count: its models are built
        now only within that many bytes, else at its turn (CandidateSpec.beside_cap)."""
        if built.failed or self._staged is not None:
            return
        with self.untimed():  # listed before a timing here begins (holding_device reads the list under the gate)
            worker = self._take_worker()
            try:
                self._send_spec(worker, built, beside_cap, staged=True)
            except ChildDied:
                worker.kill()
                return
            self._staged = (built, worker, beside_cap)
            list_staged(self.device_key, worker)

    def worker_for(self, built: Built) -> Child:
        """The worker importing `built`: the staged one where it was staged, else a fresh one."""
        staged, self._staged = self._staged, None
        if staged:
            unstage(self.device_key, staged[1])
        if staged and staged[0] is built:
            worker = staged[1]
            if staged[2]:
                try:
                    worker.send(to_dict(Request(Command.TURN)))
                except ChildDied:
                    pass  # reported when its answer is awaited
        else:
            if staged:  # staged for a candidate that did not come next
                staged[1].kill()
            worker = self._take_worker()
            try:
                self._send_spec(worker, built)
            except ChildDied:
                pass  # reported when its answer is awaited
        self.current = worker
        return worker

    def done_with(self, worker: Child, result: EvalResult) -> None:
        """The candidate's worker ended and its memory peaks recorded. An evaluator used for several
        candidates keeps a spare worker importing torch for the next one; on a machine with few
        cores started only now, so it never competes with a timing. The worker runs nothing once
        this returns; its teardown (0.2 s on a GPU) goes on behind the record, and the next timing
        or close waits for it (endings_done)."""
        worker.stop(wait=False)
        self.current = None
        if self.keep_spare and self.reference and self._spare is None:
            self._spare = self._spawn_worker(spare=True)
        result.details["peak_memory"] = {role: dict(use) for role, use in self.memory.items()}
        self.memory.pop("candidate_worker", None)  # the next candidate has a worker of its own

    def _send_spec(self, worker: Child, built: Built, beside_cap: int = 0, staged: bool = False) -> None:
        built.result.worker_log = str(worker.log_path)
        spec = import_spec(built.path, built.entry)
        worker.send(to_dict(CandidateSpec(spec.candidate, spec.lock, spec.pch_lock, problem=self.problem.path,
                                          env=built.entry.env(), device=self.options.device,
                                          model_mode=self.options.model_mode, backward=self.backward,
                                          beside_cap=beside_cap, staged=staged, **self.seeds)))

    def await_ready(self, worker: Child, result: EvalResult) -> None:
        try:
            ready = self.talk(worker, after(self.options.build_timeout, "the build timeout"),
                              "importing (building) the candidate", CandidateReady)[0]
            result.warnings.extend(ready.warnings)
            if ready.built_at_turn:
                result.details["built_at_turn"] = True
            refuse_on_guards(ready)
        except Finding:
            worker.stop()
            raise

    def talk(self, child: Child, deadline: Deadline, doing: str, kind: type[R], raw: bool = False):
        """The candidate worker's next reply, read as `kind`, and the message it came in."""
        with self._waiting(doing):
            message = received(child, deadline, doing, raw)
        reply = read_reply(kind, message)
        if reply.error:
            raise child_error(reply, reply.phase or doing)
        _note_memory(self.memory.setdefault("candidate_worker", {}), reply)
        return reply, message

    @contextmanager
    def _waiting(self, doing: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            step = step_name(doing)
            self.waits[step] = self.waits.get(step, 0.0) + time.monotonic() - started

    # -- both at another shape ----------------------------------------------------

    def reference_at(self, values: dict, deadline: Deadline) -> ShapeSet:
        """The reference rebuilt at a shape; where it cannot be, the reference process stays at the main shape."""
        self.reference.send(to_dict(Request(Command.SHAPE, shape=values)))
        return self.reference_says(deadline, ShapeSet, f"rebuilding the reference at {shape_label(values)}")

    def reference_back(self, deadline: Deadline) -> None:
        """The reference back at the main shape, for the next candidate."""
        if self.reference and self.reference.alive():
            self.reference_at({}, Deadline(deadline.at + REFERENCE_START_S, deadline.limit + REFERENCE_START_S,
                                           f"{deadline.basis}, and the reference's start limit"))

    def worker_at(self, worker: Child, values: dict, deadline: Deadline) -> None:
        """Both models in the candidate's worker rebuilt at a shape ({}: the main one)."""
        worker.send(to_dict(Request(Command.SHAPE, shape=values)))
        self.talk(worker, deadline, f"rebuilding ModelNew at {shape_label(values)}", ShapeSet)

    # -- the device ------------------------------------------------------------------

    def _start_env(self, spare: bool, first_calls: bool = False) -> dict:
        """A child's environment: a spare (importing ahead of its work) at low priority, and on a GPU
        making its device ready meanwhile (workers/warm.py): its context, and with `first_calls` (a
        reference's spare) its first calls, under this evaluation's device lock."""
        if not spare:
            return {**self.options.child_env(), **self.cores.timing_env()}
        lock = {WARM_LOCK_ENV: json.dumps({"cache": str(self.cache), "key": self.device_key, "owner": os.getpid()})
                } if first_calls else {}
        warm = {WARM_DEVICE_ENV: self.options.device, **lock} if self.options.device != "cpu" else {}
        return {**self.options.child_env(), **self.cores.timing_env(spare=True), START_NICE_ENV: "10", **warm}

    @property
    def device_key(self) -> str:
        return device_key(self.options.device, self.options.gpu)

    @contextmanager
    def device_lock(self, on_wait: Notify = quiet) -> Iterator[DeviceLock]:
        """This evaluation's device, held across harness processes (device_lock), once no other work of this
        process runs on it (untimed) and the processes this harness killed without waiting are gone
        (endings_done). Each of the three waits goes to the ledger apart (DEVICE_WAITS)."""
        gate, lock_wait, endings = DEVICE_WAITS
        with ExitStack() as held:
            with self._waiting(gate):
                held.enter_context(self.untimed())
            with self._waiting(lock_wait):
                lock = held.enter_context(DeviceLock(self.cache, self.device_key, on_wait))
            with self._waiting(endings):
                endings_done()
            yield lock

    @contextmanager
    def untimed(self) -> Iterator[None]:
        """No timing of this process on this evaluation's device meanwhile (device_lock waits): a sweep
        starts the next problem's checks beside a problem's other shapes, but not its timing."""
        with gate(self.device_key):
            yield

    @contextmanager
    def holding_device(self, doing: str, notify: Notify, result: EvalResult) -> Iterator[None]:
        """The device to this evaluation alone, across harness processes, while it times or profiles.

        Nothing else of ours runs meanwhile: a staged worker (this problem's or the next one's)
        touches the GPU, and on a machine with few cores a spare importing torch takes a core the
        timing needs (and would slow the reference beside the candidate but not alone, which reads
        as the candidate's doing)."""
        with self.device_lock(notify) as lock:
            held = staged_on(self.device_key)
            if self._spare and not MANY_CORES:
                held.append(self._spare)
            if lock.waited_for:
                # a wait for another problem of this process (a suite, a sweep's next load) is the plan, not news
                if lock.waited_for != str(os.getpid()):
                    result.warnings.append(f"{doing} waited for another harness process (pid {lock.waited_for}) "
                                           "to finish timing on this device")
                notify(doing)
            with paused(held):
                yield

    def run_deadline(self) -> Deadline:
        """A step of a few calls (trials, a shape's rebuild, the re-check): the run timeout bounds it."""
        return after(self.options.run_timeout, "the run timeout")


def step_name(doing: str) -> str:
    """A step's name in the waits ledger: what a child was `doing`, less its trial's number and its shape."""
    return re.sub(r"( at .*| \d+)$", "", doing)


def _note_memory(peaks: dict[str, int], reply: Reply) -> None:
    for key, value in (reply.memory or {}).items():
        if isinstance(value, int):
            peaks[key] = max(peaks.get(key, 0), value)
