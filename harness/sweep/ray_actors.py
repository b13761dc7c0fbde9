"""The actors of `harness sweep --ray`, and what travels between them.

A `Slot` times on one GPU of its node (on --device cpu, on the node) through the local path's
`evaluate_problem`; a `Farm` builds on a node that times nothing. Both are build hosts: a
shipped job is built there by the local path's Builder, bounded by a Builds as a host's builds
are, and comes back as a `Shipment` (the Built, its host and seconds) with, apart, its cache
entry packed as bytes. The timing slot lands that entry in its own cache, so its pool finds the
build there; it fetches the bytes only where its cache lacks the entry (a shared filesystem
has it already).
"""
from __future__ import annotations

import queue
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

from ..device import gpu_arch
from ..engine.building.cache import BuildEntry
from ..engine.building.builder import Built, Builder
from ..engine.processes.cores import Cores, default_build_jobs, usable_cores
from ..engine.options import EvalOptions
from ..engine.pool import Builds
from ..engine.processes.ownership import REGISTRY, end_leftovers
from ..engine.building.shipping import SHIP_LIMIT_BYTES, Toolchain, land, landed, misfits, pack
from ..problem import load_problem
from .jobs import Job, SuiteError
from .records import NOT_EVALUATED, SweepRecord
from .sweep import Opened, evaluate_problem

try:
    import ray
    from ray import exceptions as ray_errors
except ImportError:
    raise SuiteError("--ray needs Ray, which is not installed here: `pip install 'harness[ray]'` (Ray 2.9 or "
                     "later), on this machine and on every node of the cluster.") from None

# How a call ends when its actor's process or node died, as opposed to an error the call raised.
LOST = (ray_errors.RayActorError, ray_errors.ActorUnschedulableError, ray_errors.WorkerCrashedError,
        ray_errors.NodeDiedError, ray_errors.ObjectLostError)
# Build calls a host takes at once: more than any host's build slots (its Builds bounds the
# builds), so that a host's queue of builds never holds up a timing call to the same actor.
BUILD_CALLS = 256


@dataclass(frozen=True)
class Shipped:
    """A job with its files' text, written out again on the node that builds or evaluates it."""
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


@dataclass(frozen=True)
class Facts:
    """What a host says once started: its name, toolchain, arch (a timing slot's) and build slots."""
    name: str
    toolchain: Toolchain
    arch: str
    build_slots: int


@dataclass
class Shipment:
    """A job's build as its host made it."""
    built: Built
    host: str
    seconds: float  # from the build's start to its end (monotonic clocks are each host's own)
    compiled: bool  # a good cache entry to carry (a failed build or one with nothing to compile has none)

    def here(self, job: Job, entry: Optional[BuildEntry]) -> Built:
        """The build as the timing node's pool takes it: its files, and its cache entry there."""
        result = self.built.result
        result.candidate, result.problem = str(job.candidate), str(job.problem.resolve())
        return Built(job.candidate, entry, result, time.monotonic() - self.seconds, self.built.failed)


@dataclass(frozen=True)
class Parcel:
    """A job's build on its way: its Shipment and, apart, its packed entry (None: too large to carry)."""
    shipment: "ray.ObjectRef"
    payload: "ray.ObjectRef"


class BuildHost:
    """What Slot and Farm share: builds on this node's build cores, for the timing GPUs' arch."""
    name: str
    options: EvalOptions
    builds: Builds
    arch = ""
    cores: Optional[Cores] = None  # default: the cores the timing side leaves (Builder's)

    def facts(self) -> Facts:
        return Facts(self.name, Toolchain.here(self.options.resolved_cache()), self.arch, self.builds.slots)

    @ray.method(num_returns=2, concurrency_group="build")
    def build(self, shipped: Shipped, arch: str) -> tuple[Shipment, Optional[bytes]]:
        with tempfile.TemporaryDirectory(prefix="harness-ray-build-") as root:
            job = shipped.unpack(Path(root), 0)
            builder = Builder(load_problem(job.problem), self.options, arch, self.cores)
            built = self.builds.submit(builder, job.candidate).result()
        compiled = not built.failed and built.entry is not None and landed(built.entry)
        shipment = Shipment(built, self.name, time.monotonic() - built.started, compiled)
        return shipment, pack(built.entry) if compiled and built.entry else None


def _node_name(what: str) -> str:
    return f"{ray.util.get_node_ip_address()} {ray.get_runtime_context().get_node_id()[:6]} {what}"


@ray.remote(max_restarts=0, concurrency_groups={"build": BUILD_CALLS})
class Farm(BuildHost):
    """A node that only builds: on every core of it, by default a build per CPU it offers Ray
    (`cpus`), fewer where it has fewer cores or less memory."""

    def __init__(self, options: EvalOptions, build_jobs: Optional[int], cpus: int):
        self.options, self.name = options, _node_name("builds")
        self.cores = Cores((), usable_cores())  # no timing here to keep cores for
        self.builds = Builds(build_jobs or min(cpus, len(self.cores.build)))


@ray.remote(max_restarts=-1, max_task_retries=0,  # every death is a job's attempt, and attempts are bounded
            concurrency_groups={"build": BUILD_CALLS})
class Slot(BuildHost):
    """One timing slot on a node: a GPU (on --device cpu, the node), one problem at a time."""

    def __init__(self, options: EvalOptions, build_jobs: Optional[int], slots_on_node: int):
        gpus = ray.get_gpu_ids()
        self.gpu = int(gpus[0]) if gpus else None
        self.options = replace(options, gpu=self.gpu)
        self.arch = gpu_arch(options.device, self.gpu)
        # the node's slots share its cores
        self.builds = Builds(max(1, (build_jobs or default_build_jobs(options.device)) // slots_on_node))
        self.name = _node_name(f"gpu {self.gpu}" if self.gpu is not None else options.device)
        # the workers of this slot's earlier life, if Ray restarted it after its process was killed
        end_leftovers(self.options.resolved_cache() / REGISTRY)

    def describe(self) -> str:
        return self.name

    def evaluate(self, shipped: list[Shipped], parcels: Optional[list[Optional[Parcel]]] = None
                 ) -> Iterator[tuple[str, object]]:
        """("phase", text) and ("record", SweepRecord) as they happen. With `parcels`, each
        job's build made elsewhere (None: build it here)."""
        events: "queue.Queue[Optional[tuple[str, object]]]" = queue.Queue()
        built_on: dict[tuple[str, str, str], str] = {}
        # a landing left running once the problem is over (a problem that failed itself) is not waited for
        landings = ThreadPoolExecutor(max(1, len(shipped)), thread_name_prefix="landing")
        with tempfile.TemporaryDirectory(prefix="harness-ray-") as root:
            group = [s.unpack(Path(root), n) for n, s in enumerate(shipped)]

            def said(text: str) -> None:
                events.put(("phase", text))

            prebuilt = [landings.submit(self._land, job, parcel, built_on, said)
                        for job, parcel in zip(group, parcels)] if parcels else None
            opened = Opened(group, self.options, self.gpu, self.builds, prebuilt=prebuilt)

            def record(done: SweepRecord) -> None:
                done.built_on = built_on.get(done.key, "" if done.verdict in NOT_EVALUATED else self.name)
                events.put(("record", done))

            def work() -> None:
                try:
                    evaluate_problem(self.name, opened, record, lambda slot, text: said(text))
                except BaseException as exc:  # noqa: BLE001 - raised in the call, below
                    events.put(("error", exc))
                finally:
                    opened.close()
                    events.put(None)

            # the pool calls back from its own threads; a generator yields only from the call's
            threading.Thread(target=work, daemon=True).start()
            try:
                for event in iter(events.get, None):
                    if event[0] == "error":
                        raise event[1]  # type: ignore[misc]
                    yield event
            finally:
                landings.shutdown(wait=False, cancel_futures=True)

    def _land(self, job: Job, parcel: Optional[Parcel], built_on: dict, said: Callable[[str], None]) -> Built:
        """The job's build, carried here from its host; where it cannot be, built here."""
        if parcel is not None:
            try:
                shipment = ray.get(parcel.shipment)
                built = self._carried(job, shipment, parcel)
                if built is not None:
                    built_on[job.key] = shipment.host
                    return built
                why = f"its build on {shipment.host} is over {SHIP_LIMIT_BYTES >> 20} MB to carry"
            except (*LOST, ray_errors.RayTaskError) as exc:
                why = f"its build elsewhere was lost ({type(exc).__name__})"
            said(f"{job.level}/{job.problem.stem} {job.label}: {why}; building it here")
        built_on[job.key] = self.name
        return self.builds.submit(Builder(load_problem(job.problem), self.options), job.candidate).result()

    def _carried(self, job: Job, shipment: Shipment, parcel: Parcel) -> Optional[Built]:
        """The shipment as this node's pool takes it, its entry landed in this node's cache; None
        where the entry was too large to carry."""
        made = shipment.built.entry
        if made is None:  # refused before any build: the result is final as it is
            return shipment.here(job, None)
        entry = BuildEntry(self.options.resolved_cache(), job.candidate.read_text(), made.arch)
        unfit = misfits(entry, made, self.arch)
        if unfit:
            raise SuiteError(
                f"The build of {job.label} ({job.level}/{job.problem.stem}) made on {shipment.host} does not fit "
                f"{self.name}: {'; '.join(unfit)}. It was not loaded. Give every node the same torch, Python and "
                "CUDA toolkit, then carry the sweep on with --resume and its folder.")
        if shipment.compiled and not landed(entry):
            data = ray.get(parcel.payload)
            if data is None:
                return None
            land(entry, data)
        return shipment.here(job, entry)
