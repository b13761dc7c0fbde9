"""`harness sweep --ray ADDRESS`: the same sweep on a Ray cluster.

Per node one timing actor per GPU (on --device cpu, one per node, or only on the nodes that offer
the TIMING resource where some do), pinned to its node and holding its share of the node's CPUs
(all of them on --device cpu), so Ray places nothing else beside the timing. An actor evaluates
one problem's candidates at a time through the local path's `evaluate_problem` and streams each
record back as it finishes; the driver alone writes the results log, so records and --resume are
the local sweep's.

Builds run ahead on every node with CPUs to spare: a `Farm` on each node that times nothing (a
GPU-less node; on --device cpu, a node without the TIMING resource where some have it), and on
a GPU the timing actors themselves, on the cores their timing leaves (ray_actors.py). Every
candidate's build is handed to a host when the sweep starts, spread by the hosts' build slots,
for the timing GPUs' architectures; the timing actor that evaluates it lands the built entry in
its node's cache. The hosts' toolchains are compared first: nodes that would not load each
other's builds as built stop the sweep with what differs. On --device cpu with no build-only node,
each timing actor builds the problem it evaluates, as before.

A dead actor loses only its in-flight evaluations: the driver queues them again, one job to a
group (so a candidate that kills its actor takes no other down with it twice), for any actor.
Ray restarts an actor whose process died where its node lives; one whose node is gone is
dropped. A job lost MAX_ATTEMPTS times is recorded as crashed rather than tried forever. A build
lost with its host is built again by the actor that times it.

Problem and candidate files travel with the jobs, so the nodes need no shared filesystem; each
needs the harness and torch installed, as the driver has them.
"""
from __future__ import annotations

import socket
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from ..engine.options import EvalOptions
from ..engine.pool import Counts
from ..results import Verdict
from .jobs import Job, SuiteError
from .ray_actors import LOST, Facts, Farm, Parcel, Shipped, Slot, ray, ray_errors
from .records import SweepRecord, ResultLog
from .sweep import Sweep, Phase, Recorded, by_problem, loadable, pending, run_all
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

MAX_ATTEMPTS = 3  # a job whose actor died under it this many times is recorded as crashed
RESTART_WAIT = 120.0  # seconds for an actor to start, or for Ray to restart it
# What an actor answers while Ray restarts it (Ray 2.22 and later; before, the call waits)
RESTARTING = getattr(ray_errors, "ActorUnavailableError", ())
# A custom resource (`ray start --resources '{"harness_timing": 1}'`): on --device cpu, where any
# node offers it, only those nodes time and the others build.
TIMING = "harness_timing"


START = ("Start one with `ray start --head` (and `ray start --address HEAD:6379` on each other node), or give "
         "its address.")


def connect(address: str) -> list[dict]:
    """The cluster's live nodes, connecting this process to the cluster first."""
    if not ray.is_initialized():
        _answers(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise SuiteError(f"No Ray cluster to join at {address}: {exc} {START}") from None
    return [node for node in ray.nodes() if node["Alive"]]


def _answers(address: str) -> None:
    """A HOST:PORT where nothing listens is said at once; ray.init would retry it for minutes."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # auto, or a scheme Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        raise SuiteError(f"No Ray cluster to join at {address}: nothing answers there ({exc}). {START}") from None


def cluster_device(address: str) -> str:
    """cuda where a node of the cluster has a GPU, else cpu."""
    return "cuda" if any(node["Resources"].get("GPU") for node in connect(address)) else "cpu"


def slots_on(node: dict, cpu: bool, named: bool = False) -> int:
    """A node's timing slots: one per GPU; on the CPU, one where the node has a CPU (and, where
    some node offers the TIMING resource (`named`), offers it too)."""
    resources = node["Resources"]
    if not cpu:
        return int(resources.get("GPU", 0))
    return 1 if resources.get("CPU", 0) >= 1 and (resources.get(TIMING) or not named) else 0


class RaySweep(Sweep):
    """The local Sweep's interface (`where`, `run`), its slots Ray actors across the cluster."""

    def __init__(self, address: str, options: EvalOptions, log: ResultLog, build_jobs: Optional[int] = None,
                 on_record: Optional[Recorded] = None, on_phase: Optional[Phase] = None,
                 on_builds: Optional[Counts] = None):
        if options.cache_dir:  # the same path on every node: a built entry's sources are named by it
            options = replace(options, cache_dir=Path(options.cache_dir).absolute())
        super().__init__(options, None, log, build_jobs, on_record, on_phase, on_builds)
        self.address, self.requested_jobs = address, build_jobs
        cpu = options.device == "cpu"
        nodes = connect(address)
        named = cpu and any(node["Resources"].get(TIMING) for node in nodes)
        # (node, slots on it, CPUs each slot holds)
        self.nodes = [(node["NodeID"], count, int(node["Resources"].get("CPU", 0)) // count)
                      for node in nodes if (count := slots_on(node, cpu, named))]
        if not self.nodes:
            raise SuiteError(f"The Ray cluster at {address} has no node with " +
                             (f"a CPU to time on{' and the ' + TIMING + ' resource' if named else ''}." if cpu else
                              "a GPU: give --device cpu to time on the nodes' CPUs."))
        # (node, its CPUs): the nodes that time nothing build
        self.farms = [(node["NodeID"], int(node["Resources"]["CPU"])) for node in nodes
                      if node["Resources"].get("CPU", 0) >= 1 and not slots_on(node, cpu, named)]
        self._queue: deque[list[Job]] = deque()
        self.lost: dict[tuple[str, str, str], int] = {}  # by job: how often its actor died under it
        self._busy = 0  # groups in flight, which may come back to the queue
        self._turn = threading.Condition()
        self._gone: list[str] = []  # why actors ended
        self._parcels: dict[tuple[str, str, str], Parcel] = {}  # by job: its build made ahead, until recorded
        self._over = threading.Event()  # the sweep has ended: stop counting builds
        self._build_slots = 0  # the build hosts' slots together

    @property
    def where(self) -> str:
        slots = sum(count for _, count, _ in self.nodes)
        return f"the Ray cluster at {self.address} ({len(self.nodes)} node(s) timing, {slots} timing slot(s), " \
               f"{len(self.farms)} build-only node(s), {self.options.device})"

    def run(self, jobs: Sequence[Job]) -> list[SweepRecord]:
        groups = by_problem(pending(jobs, self.log))
        self._queue.extend(groups)
        slots = [Slot.options(num_cpus=cpus, num_gpus=0 if self.options.device == "cpu" else 1,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                              ).remote(self.options, self.requested_jobs, count)
                 for node, count, cpus in self.nodes for _ in range(count)]
        farms = [Farm.options(num_cpus=cpus, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                              ).remote(self.options, self.requested_jobs, cpus) for node, cpus in self.farms]
        counting = threading.Thread(target=self._count_builds, daemon=True)
        try:
            self._parcels = self._farm_out(groups, slots, farms)
            counting.start()
            run_all([threading.Thread(target=self._serve, args=(slot,), daemon=True) for slot in slots])
        finally:
            self._over.set()
            if counting.is_alive():
                counting.join()
            for actor in slots + farms:
                ray.kill(actor)
            ray.shutdown()
        if self._errors:
            raise self._errors[0]
        if self._queue:
            left = sum(len(group) for group in self._queue)
            raise SuiteError(f"No actor of the Ray cluster at {self.address} is left for the {left} evaluation(s) "
                             f"still to do ({'; '.join(self._gone)}). The results so far are in {self.log.path}: "
                             f"--resume {self.log.path.parent} carries the sweep on.")
        return list(self.log.records)

    def _farm_out(self, groups: list[list[Job]], slots: list, farms: list) -> dict[tuple[str, str, str], Parcel]:
        """Every candidate's build, handed now to a build host (the farms, and on a GPU the timing
        slots too), each host's share as its build slots; {} where no node has cores to spare
        (--device cpu, every node timing): each slot then builds what it evaluates."""
        cpu = self.options.device == "cpu"
        if cpu and not farms:
            return {}
        timing, hosts = self._described(slots), self._described(farms)
        hosts += [] if cpu else timing
        if not timing or not hosts:
            return {}  # no slot started (_serve says why), or no farm on the CPU: the slots build
        for _, facts in timing[1:] + hosts:
            self._check(timing[0][1], facts)
        arch = ";".join(sorted({facts.arch for _, facts in timing}))
        self._build_slots = sum(facts.build_slots for _, facts in hosts)
        given = [0] * len(hosts)
        parcels = {}
        for group in groups:
            if loadable(group) is None:
                continue  # nothing is built ahead: its pool says why
            for job in group:
                host = min(range(len(hosts)), key=lambda h: (given[h] + 1) / hosts[h][1].build_slots)
                given[host] += 1
                shipment, payload = hosts[host][0].build.remote(Shipped.of(job), arch)
                parcels[job.key] = Parcel(shipment, payload)
        return parcels

    def _described(self, actors: list) -> list[tuple[object, Facts]]:
        """The actors that started, with what they say of themselves; the others are left out."""
        refs = [actor.facts.remote() for actor in actors]
        deadline = time.monotonic() + RESTART_WAIT
        described = []
        for actor, ref in zip(actors, refs):
            try:
                described.append((actor, ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))))
            except (*LOST, ray_errors.GetTimeoutError) as exc:
                self._went(exc)
            except ray_errors.RayTaskError as exc:
                raise (exc.cause or exc) from None
        return described

    def _check(self, first: Facts, other: Facts) -> None:
        differ = first.toolchain.differences(other.toolchain)
        if differ:
            raise SuiteError(
                f"The nodes of the Ray cluster at {self.address} would not load each other's builds as built: "
                f"{first.name} and {other.name} differ in {'; '.join(differ)}. Give every node the same torch, "
                "Python and CUDA toolkit at the same paths and the build cache at the same path (--cache-dir), or "
                "leave the odd node out of the cluster.")

    def _count_builds(self) -> None:
        """The builds handed out, running and done, for the live view, as their hosts finish them."""
        waiting = [parcel.shipment for parcel in self._parcels.values()]
        total = len(waiting)
        while waiting and not self._over.is_set():
            _, waiting = ray.wait(waiting, num_returns=1, timeout=1.0, fetch_local=False)
            if self.on_builds:  # those not done run, as far as the hosts' slots go
                self.on_builds(total, min(len(waiting), self._build_slots), total - len(waiting))

    def _serve(self, slot) -> None:
        name = self._name(slot)
        while name is not None:
            group = self._next()
            if group is None:
                break
            left = {job.key: job for job in group}
            parcels = [self._parcels.get(job.key) for job in group]
            try:
                for ref in slot.evaluate.options(num_returns="streaming").remote(
                        [Shipped.of(j) for j in group], parcels if any(parcels) else None):
                    kind, value = ray.get(ref)
                    if kind == "record":
                        left.pop(value.key, None)
                        self._record(value)
                    else:
                        self.on_phase(name, value)
            except LOST as exc:
                self._lost(list(left.values()), f"{type(exc).__name__} on {name}")
                name = self._name(slot)  # back once Ray restarted it, None where its node is gone
            except ray_errors.RayTaskError as exc:
                self._errors.append(exc.cause or exc)
            except BaseException as exc:  # noqa: BLE001 - the main thread raises it
                self._errors.append(exc)
            finally:
                with self._turn:
                    self._busy -= 1
                    self._turn.notify_all()
        if name is not None:
            self.on_phase(name, "done")

    def _name(self, slot) -> Optional[str]:
        """The slot's name once its actor is up; None when it is gone for good."""
        deadline = time.monotonic() + RESTART_WAIT
        while True:
            try:
                return ray.get(slot.describe.remote(), timeout=max(1.0, deadline - time.monotonic()))
            except (*LOST, ray_errors.GetTimeoutError, ray_errors.RayTaskError) as exc:
                # an actor that Ray is restarting answers ActorUnavailableError until it is up: not gone
                if isinstance(exc, RESTARTING) and time.monotonic() < deadline:
                    time.sleep(1.0)
                    continue
                self._went(exc)
                return None

    def _went(self, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [""])[0]
        self._gone.append(f"{type(exc).__name__}: {first[:200]}")

    def _next(self) -> Optional[list[Job]]:
        """The next group; while others are in flight and might come back, wait for them."""
        with self._turn:
            while not self._queue and self._busy and not self._errors:
                self._turn.wait(1.0)
            if self._errors or not self._queue:
                return None
            self._busy += 1
            return self._queue.popleft()

    def _record(self, record: SweepRecord) -> None:
        self._parcels.pop(record.key, None)  # its build's bytes may leave the object store
        super()._record(record)

    def _lost(self, jobs: list[Job], why: str) -> None:
        """Jobs whose actor died under them: queued again, or recorded as crashed after MAX_ATTEMPTS."""
        again = []
        for job in jobs:
            self.lost[job.key] = attempts = self.lost.get(job.key, 0) + 1
            if attempts < MAX_ATTEMPTS:
                again.append(job)
            else:
                self._record(SweepRecord(
                    job.problem.stem, job.level, job.label, job.sample, Verdict.CRASHED.value,
                    explanation=f"The Ray actor evaluating it died {attempts} times, the last {why}; "
                                "it was not tried again."))
        with self._turn:
            self._queue.extend([job] for job in again)
