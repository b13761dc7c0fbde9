"""Memory in a worker: what the process and the device hold, and a big model's weights parked
on the host while its process does not run it."""
from __future__ import annotations

import itertools
from pathlib import Path

import torch



def memory_use(device: torch.device) -> dict[str, int]:
    """This process's peak memory so far (protocol.Reply.memory)."""
    use = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                use["host"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        use["gpu"], use["device_used"] = torch.cuda.max_memory_allocated(device), total - free
    return use


def peak_above(device: torch.device, run):
    """run()'s result, and the most it allocated on a GPU above what was allocated when it started
    (0 on a CPU, where nothing counts allocations cheaply)."""
    if device.type != "cuda":
        return run(), 0
    torch.cuda.synchronize(device)
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = run()
    torch.cuda.synchronize(device)
    return result, torch.cuda.max_memory_allocated(device) - start


def free_cache(device: torch.device) -> None:
    """Between phases: what this process freed goes back to the device, for the other process:
    the reference's and the candidate's peaks then come one after the other, not on top."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def tensor_bytes(values: list) -> int:
    return sum(v.nbytes for v in values if isinstance(v, torch.Tensor))


def memory_available(device: torch.device) -> int:
    """Bytes free for more tensors: the GPU's free memory, or on a CPU the host's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def held_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """A model's parameters and buffers."""
    return list(itertools.chain(model.parameters(), model.buffers()))


def held_bytes(model: torch.nn.Module) -> int:
    """What a model's parameters and buffers take."""
    return tensor_bytes(held_tensors(model))


# A model whose parameters and buffers take at least this much waits on the host while its process does
# not run it (Parking): the candidate's worker parks the reference it builds for its parameters' values.
PARK_BYTES = 256 << 20


class Parking:
    """A big model's parameters and buffers (PARK_BYTES or more) on the host while its process does
    not run it, back on their device before it does: the candidate's worker parks the reference it
    builds only to copy its parameters' values, before ModelNew is built beside it. Each tensor stays the same object
    (only its data moves), so State and the model's own references to its tensors stay valid. The
    host copies are page-locked, once: a 4 GB model then moves in a fraction of a second each way,
    several times faster than through pageable memory."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.device = device
        self.tensors = held_tensors(model)
        self.homes = [t.device for t in self.tensors]
        self.applies = device.type == "cuda" and tensor_bytes(self.tensors) >= PARK_BYTES
        self.host: list[torch.Tensor] = []
        self.parked = False

    def park(self) -> None:
        if not self.applies or self.parked:
            return
        with torch.no_grad():
            if not self.host:
                self.host = [torch.empty_like(t, device="cpu", pin_memory=True) for t in self.tensors]
            for tensor, host in zip(self.tensors, self.host):
                host.copy_(tensor.data)
                tensor.data = host
        self.parked = True
        free_cache(self.device)

    def unpark(self) -> None:
        if self.parked:
            with torch.no_grad():
                for tensor, home in zip(self.tensors, self.homes):
                    tensor.data = tensor.data.to(home)
            self.parked = False
