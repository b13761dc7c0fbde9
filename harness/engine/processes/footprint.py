"""How much memory one evaluation of a problem holds, and the refusal of a problem too big for
its device, said before the first trial."""
from __future__ import annotations

from typing import Optional

from ...problem import Problem, ProblemError
from .protocol import ReferenceReady


class DoesNotFit(ProblemError):
    """The problem needs more memory than its device has free; said before the first trial."""


def gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def footprint(ready: ReferenceReady) -> int:
    """Bytes one evaluation of the problem holds on its device at the most, over all processes. Each
    process holds one input draw and two sets of outputs: while timing, a call's and the one before it,
    kept alive until the next returns (clock.LocalParty); in a check, the reference process the
    reference's outputs and the candidate's it compares, the worker a trial's and the last trial's.
    Then a forward's workspace; the two models' parameters, one in each process; each timing's
    cache-flush buffer (the two processes take turns, each with its own); and the reference's twins
    where they are made."""
    params = ready.parameter_bytes
    twins = twin_count(params, placement_budget(ready)) * params
    return (2 * (ready.input_bytes + 2 * ready.output_bytes) + ready.workspace_bytes
            + 2 * params + 2 * ready.flush_bytes + twins)


def in_process_need(ready: ReferenceReady) -> int:
    """Bytes an in-process evaluation (KernelBench's) holds at the most: one input draw, both
    models' outputs and parameters, the workspace of the forward that runs beside the other's
    outputs, and the cache-flush buffer. The measure of a frugal engine."""
    return (ready.input_bytes + 2 * ready.output_bytes + ready.workspace_bytes + 2 * ready.parameter_bytes
            + ready.flush_bytes)


def fit_refusal(problem: Problem, ready: ReferenceReady, device: str, limit: Optional[int],
                host_limit: Optional[int]) -> Optional[str]:
    """The paragraph that refuses a problem too big for its device (footprint), or None when it fits."""
    inputs, outputs = ready.input_bytes, ready.output_bytes
    kept = in_process_need(ready)
    needed = footprint(ready)
    where = "the GPU" if device != "cpu" else "the host"
    workspace = f"; a forward's own workspace {gb(ready.workspace_bytes)}" if ready.workspace_bytes else ""
    free = limit if limit is not None else ready.available_bytes
    if free and needed > free:
        given = " (the limit given)" if limit is not None else " free"
        return (f"Problem file {problem.path} does not fit: one evaluation needs about {gb(needed)} "
                f"(inputs {gb(inputs)}, outputs {gb(outputs)}, kept copies {gb(kept)}: the reference's outputs "
                f"and the candidate's side by side, and the timing's cache flush{workspace}); {where} has "
                f"{gb(free)}{given}. "
                "Make get_inputs() smaller, or use a device with more memory.")
    worker = inputs + outputs + ready.flush_bytes
    if device == "cpu" and host_limit and worker > host_limit:
        return (f"Problem file {problem.path} does not fit: the candidate's process needs about {gb(worker)} "
                f"(inputs {gb(inputs)}, outputs {gb(outputs)}), over the host-memory limit of {gb(host_limit)} "
                "(--max-host-memory). Raise the limit or make get_inputs() smaller.")
    return None


# the reference's twins (placement_spread) may take at most this share of the in-process need, or
# PLACEMENT_FLOOR where that is more: a small model's twins must be measured (EfficientNet-B1's 31 MB
# of parameters: two instances in one process differ by 1-1.6% on an H100, more than a small share allows)
PLACEMENT_SHARE = 0.1
PLACEMENT_FLOOR = 1 << 30


def placement_budget(ready: ReferenceReady) -> int:
    return int(max(PLACEMENT_SHARE * in_process_need(ready), PLACEMENT_FLOOR))


# Twins of the reference made to measure placement_spread, where the budget holds that many. Where a
# model's tensors land sorts its time into groups: on an H200, eleven instances of L1/40_LayerNorm in
# one process read in two groups about 1% apart, alike in every process, and two twins stayed within
# 0.2% of the reference in four sweeps of four while a copy read up to 1.3% fast. Were each placement
# a toss between two even groups, all seven (the reference, six twins) would fall in one about once
# in 64 problems. One twin per pad: the memory held before it is made (workers.reference.twins), so
# its tensors land at other addresses than the reference's; odd sizes, not multiples of the
# allocator's 2 MiB pages.
TWIN_PADS_MIB = (7, 33, 1, 13, 3, 21)
TWINS = len(TWIN_PADS_MIB)
MIN_TWINS = 2  # fewer do not measure a spread: none are made


def twin_count(held: int, budget: int) -> int:
    """How many twins of a model holding `held` bytes of tensors the budget allows: up to TWINS,
    0 below MIN_TWINS or where it holds none."""
    count = min(TWINS, budget // held) if held else 0
    return count if count >= MIN_TWINS else 0
