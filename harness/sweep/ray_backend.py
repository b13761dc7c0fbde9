"""`harness sweep --ray ADDRESS`: the same sweep on a Ray cluster.

Per node one timing actor per GPU (on --device cpu, one per node), pinned to its node and
holding its share of the node's CPUs (all of them on --device cpu), so Ray places nothing else
beside the timing. An actor evaluates one problem's candidates at a time through the local
path's `evaluate_problem` (its pool builds on the node's cores) and streams each record back as
it finishes; the driver alone writes the results log, so records and --resume are the local
sweep's.

A dead actor loses only its in-flight evaluations: the driver queues them again, one job to a
group (so a candidate that kills its actor takes no other down with it twice), for any actor.
Ray restarts an actor whose process died where its node lives; one whose node is gone is
dropped. A job lost MAX_ATTEMPTS times is recorded as crashed rather than tried forever.

Problem and candidate files travel with the jobs, so the nodes need no shared filesystem; each
needs the harness and torch installed, as the driver has them.
"""
from __future__ import annotations

import queue
import socket
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Optional, Sequence

from ..engine.options import EvalOptions
from ..engine.cores import default_build_jobs
from ..engine.pool import Builds
from ..engine.process import REGISTRY, end_leftovers
from ..results import Verdict
from .sweep import Sweep, Opened, Phase, Recorded, by_problem, evaluate_problem, pending, run_all
from .jobs import Job, SuiteError
from .records import SweepRecord, ResultLog

try:
    import ray
    from ray import exceptions as ray_errors
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:
    raise SuiteError("--ray needs Ray, which is not installed here: `pip install 'harness[ray]'` (Ray 2.9 or "
                     "later), on this machine and on every node of the cluster.") from None

MAX_ATTEMPTS = 3  # a job whose actor died under it this many times is recorded as crashed
RESTART_WAIT = 120.0  # seconds for an actor to start, or for Ray to restart it
# How a call ends when its actor's process or node died, as opposed to an error the call raised.
LOST = (ray_errors.RayActorError, ray_errors.ActorUnschedulableError, ray_errors.WorkerCrashedError,
        ray_errors.NodeDiedError, ray_errors.ObjectLostError)
# What an actor answers while Ray restarts it (Ray 2.22 and later; before, the call waits)
RESTARTING = getattr(ray_errors, "ActorUnavailableError", ())


@dataclass(frozen=True)
class Shipped:
    """A job with its files' text, written out again on the node that evaluates it."""
    job: Job
    problem: str
    candidate: str

    @classmethod
    def of(cls, job: Job) -> "Shipped":
        return cls(job, _read(job.problem), _read(job.candidate))

    def unpack(self, root: Path, index: int) -> Job:
        """The job with its files under `root`, named as on the driver (records use those names)."""
        problem = root / "problems" / self.job.level / self.job.problem.name
        candidate = root / "candidates" / str(index) / self.job.candidate.name
        for path, text in ((problem, self.problem), (candidate, self.candidate)):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return replace(self.job, problem=problem, candidate=candidate)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"File {path} cannot be read to send to the Ray cluster: {exc}.") from None


@ray.remote(max_restarts=-1, max_task_retries=0)  # every death is a job's attempt, and attempts are bounded
class Slot:
    """One timing slot on a node: a GPU (on --device cpu, the node), one problem at a time."""

    def __init__(self, options: EvalOptions, build_jobs: Optional[int], slots_on_node: int):
        gpus = ray.get_gpu_ids()
        self.gpu = int(gpus[0]) if gpus else None
        self.options = replace(options, gpu=self.gpu)
        # the node's slots share its cores
        self.builds = Builds(max(1, (build_jobs or default_build_jobs(options.device)) // slots_on_node))
        node = ray.get_runtime_context().get_node_id()
        self.name = f"{ray.util.get_node_ip_address()} {node[:6]} " + \
            (f"gpu {self.gpu}" if self.gpu is not None else options.device)
        # the workers of this slot's earlier life, if Ray restarted it after its process was killed
        end_leftovers(self.options.resolved_cache() / REGISTRY)

    def describe(self) -> str:
        return self.name

    def evaluate(self, shipped: list[Shipped]) -> Iterator[tuple[str, object]]:
        """("phase", text) and ("record", SweepRecord) as they happen."""
        events: "queue.Queue[Optional[tuple[str, object]]]" = queue.Queue()
        with tempfile.TemporaryDirectory(prefix="harness-ray-") as root:
            opened = Opened([s.unpack(Path(root), n) for n, s in enumerate(shipped)], self.options, self.gpu,
                            self.builds)

            def work() -> None:
                try:
                    evaluate_problem(self.name, opened, lambda record: events.put(("record", record)),
                                     lambda slot, text: events.put(("phase", text)))
                except BaseException as exc:  # noqa: BLE001 - raised in the call, below
                    events.put(("error", exc))
                finally:
                    opened.close()
                    events.put(None)

            # the pool calls back from its own threads; a generator yields only from the call's
            threading.Thread(target=work, daemon=True).start()
            for event in iter(events.get, None):
                if event[0] == "error":
                    raise event[1]  # type: ignore[misc]
                yield event


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


def slots_on(node: dict, cpu: bool) -> int:
    """A node's timing slots: one per GPU; on the CPU, one where the node has a CPU."""
    resources = node["Resources"]
    return (1 if resources.get("CPU", 0) >= 1 else 0) if cpu else int(resources.get("GPU", 0))


class RaySweep(Sweep):
    """The local Sweep's interface (`where`, `run`), its slots Ray actors across the cluster."""

    def __init__(self, address: str, options: EvalOptions, log: ResultLog, build_jobs: Optional[int] = None,
                 on_record: Optional[Recorded] = None, on_phase: Optional[Phase] = None):
        super().__init__(options, None, log, build_jobs, on_record, on_phase)
        self.address, self.requested_jobs = address, build_jobs
        cpu = options.device == "cpu"
        # (node, slots on it, CPUs each slot holds)
        self.nodes = [(node["NodeID"], count, int(node["Resources"].get("CPU", 0)) // count)
                      for node in connect(address) if (count := slots_on(node, cpu))]
        if not self.nodes:
            raise SuiteError(f"The Ray cluster at {address} has no node with " +
                             ("a CPU to time on." if cpu else "a GPU: give --device cpu to time on the nodes' CPUs."))
        self._queue: deque[list[Job]] = deque()
        self.lost: dict[tuple[str, str, str], int] = {}  # by job: how often its actor died under it
        self._busy = 0  # groups in flight, which may come back to the queue
        self._turn = threading.Condition()
        self._gone: list[str] = []  # why actors ended

    @property
    def where(self) -> str:
        slots = sum(count for _, count, _ in self.nodes)
        return f"the Ray cluster at {self.address} ({len(self.nodes)} node(s), {slots} timing slot(s), " \
               f"{self.options.device})"

    def run(self, jobs: Sequence[Job]) -> list[SweepRecord]:
        self._queue.extend(by_problem(pending(jobs, self.log)))
        slots = [Slot.options(num_cpus=cpus, num_gpus=0 if self.options.device == "cpu" else 1,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                              ).remote(self.options, self.requested_jobs, count)
                 for node, count, cpus in self.nodes for _ in range(count)]
        try:
            run_all([threading.Thread(target=self._serve, args=(slot,), daemon=True) for slot in slots])
        finally:
            for slot in slots:
                ray.kill(slot)
            ray.shutdown()
        if self._errors:
            raise self._errors[0]
        if self._queue:
            left = sum(len(group) for group in self._queue)
            raise SuiteError(f"No actor of the Ray cluster at {self.address} is left for the {left} evaluation(s) "
                             f"still to do ({'; '.join(self._gone)}). The results so far are in {self.log.path}: "
                             f"--resume {self.log.path.parent} carries the sweep on.")
        return list(self.log.records)

    def _serve(self, slot) -> None:
        name = self._name(slot)
        while name is not None:
            group = self._next()
            if group is None:
                break
            left = {job.key: job for job in group}
            try:
                for ref in slot.evaluate.options(num_returns="streaming").remote([Shipped.of(j) for j in group]):
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
                first = (str(exc).strip().splitlines() or [""])[0]
                self._gone.append(f"{type(exc).__name__}: {first[:200]}")
                return None

    def _next(self) -> Optional[list[Job]]:
        """The next group; while others are in flight and might come back, wait for them."""
        with self._turn:
            while not self._queue and self._busy and not self._errors:
                self._turn.wait(1.0)
            if self._errors or not self._queue:
                return None
            self._busy += 1
            return self._queue.popleft()

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
