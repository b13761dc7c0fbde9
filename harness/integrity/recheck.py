"""The sampled re-check of timed outputs.

Every call the clock timed is re-checked, not only the check trials: the
candidate process samples each timed output at positions drawn after the call
returned (TimedOutputs), and the reference process recomputes those positions
from the same inputs (verify_timed). A candidate that is right only while
being checked fails here.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ..files import new_seed
from ..problem import tolerance, widened
from ..results import CheckResult, as_list

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
    so only an output that is right everywhere passes reliably. The samples go into
    blocks of ROWS calls made ahead: a small tensor kept per call, among the big
    blocks each call's inputs and outputs take and give back, would keep the heap
    from shrinking (120 MB over 30 calls of a 256 MB ReLU on a CPU)."""

    ROWS = 256

    def __init__(self, device: torch.device):
        self.device = device
        self.samples: list[dict] = []
        # per output position: its blocks (ROWS x width, float64) and the rows filled; once a call's outputs differ
        # in number or width from the first's (they fail the re-check by their shape anyway), every call's
        # samples are kept call by call instead (ragged)
        self.blocks: dict[int, list[torch.Tensor]] = {}
        self.filled: dict[int, int] = {}
        self.ragged: list[list[torch.Tensor]] = []

    def observe(self, seed: int, output: Any) -> None:
        key = new_seed()
        outputs, meta, values = as_list(output), [], []
        for i, out in enumerate(outputs):
            if type(out) is not torch.Tensor:
                meta.append({"unsupported": type(out).__qualname__})
                continue
            flat = out.detach().reshape(-1)
            meta.append({"shape": list(out.shape), "dtype": str(out.dtype).removeprefix("torch.")})
            values.append(flat[sample_positions(flat.numel(), key + i, flat.device)])
        self.samples.append({"seed": seed, "key": key, "outputs": meta})
        self._keep(values)

    def _keep(self, values: list[torch.Tensor]) -> None:
        widths = [v.numel() for v in values]
        if self.blocks and (len(widths) != len(self.blocks) or any(
                self.blocks[i][0].shape[1] != w for i, w in enumerate(widths))):
            self.ragged = self._calls()  # from here on, call by call
            self.blocks, self.filled = {}, {}
        if self.ragged:
            self.ragged.append([v.to(torch.float64) for v in values])
            return
        for i, value in enumerate(values):
            blocks, row = self.blocks.setdefault(i, []), self.filled.get(i, 0)
            if row == len(blocks) * self.ROWS:
                blocks.append(torch.empty(self.ROWS, value.numel(), dtype=torch.float64, device=value.device))
            blocks[row // self.ROWS][row % self.ROWS].copy_(value)
            self.filled[i] = row + 1

    def _calls(self) -> list[list[torch.Tensor]]:
        """What the blocks hold, call by call."""
        rows = {i: torch.cat(blocks)[:self.filled[i]] for i, blocks in self.blocks.items()}
        calls = max(self.filled.values(), default=0)
        return [[rows[i][call] for i in sorted(rows)] for call in range(calls)]

    def message(self) -> tuple[list[dict], list]:
        """The samples' descriptions, and one tensor per output position: its samples stacked, as few descriptors
        as possible (none where the calls' outputs differ in number)."""
        if not self.ragged:
            return self.samples, [torch.cat(blocks)[:self.filled[i]].reshape(-1).cpu()
                                  for i, blocks in sorted(self.blocks.items())]
        if any(len(call) != len(self.ragged[0]) for call in self.ragged):
            return self.samples, []
        return self.samples, [torch.cat([call[i].reshape(-1).cpu() for call in self.ragged])
                              for i in range(len(self.ragged[0]))]


def verify_timed(samples: list[dict], tensors: list[torch.Tensor],
                 reference: Callable[[int], list], tolerances: dict, labels: Optional[list[str]] = None,
                 first_gradient: Optional[int] = None, grad_tolerances: Optional[dict] = None,
                 allowance: Optional[list[float]] = None) -> tuple[CheckResult, list[int]]:
    """Re-check the sampled outputs of every timed call against the reference
    on the same inputs. `samples` and `tensors` are what TimedOutputs.message
    gave; `reference(seed)` runs the reference on the inputs of that seed and
    returns its outputs as a list. Under --backward, `labels` name each entry and
    entries from `first_gradient` on are gradients (None where there is none), their atol
    plus their `allowance`.

    The comparisons stay on the device until every call is queued, then come back in one read:
    a read per call would make the host wait for each call's draw and forward in turn. Also returns the
    index of every call whose outputs were wrong, for the verdict to say which calls they were."""
    offsets = [0] * len(tensors)
    on_device: dict[tuple, torch.Tensor] = {}  # the candidate's samples, moved once per output position
    # per call: the outputs compared on the device, each (label, index into `agreed`), then what is already
    # known wrong (a sentence each; the call's outputs after one are not looked at)
    said: list[tuple[list[tuple[str, int]], list[str]]] = []
    agreed: list[torch.Tensor] = []
    for sample in samples:
        refs = reference(int(sample["seed"]))
        pending: list[tuple[str, int]] = []
        reasons: list[str] = []
        metas = sample.get("outputs") or []
        sent = sum("unsupported" not in meta for meta in metas)
        if len(metas) != len(refs) or len(tensors) != sent:
            reasons.append(f"it returned {len(metas)} output(s) where the reference returns {len(refs)}")
        position = 0  # which of `tensors` holds this entry's samples
        for i, (ref, meta) in enumerate(zip(refs, metas)):
            if reasons:
                break
            label = labels[i] if labels else f"output {i}"
            gradient = first_gradient is not None and i >= first_gradient
            if "unsupported" in meta:
                if not (gradient and ref is None and meta["unsupported"] == "NoneType"):
                    reasons.append(f"{label} is missing (None) where the reference has one" if gradient and
                                   meta["unsupported"] == "NoneType" else
                                   f"{label} is a {meta['unsupported']}, expected a plain torch.Tensor")
                continue
            if ref is None:  # a gradient the reference has not: only zeros agree, and the sample must show them
                ref = torch.zeros(meta.get("shape") or [0], device=tensors[position].device)
                meta = {**meta, "dtype": "float32"}
            if meta.get("shape") != list(ref.shape) or meta.get("dtype") != str(ref.dtype).removeprefix("torch."):
                reasons.append(f"{label} has shape {meta.get('shape')} and dtype {meta.get('dtype')}")
                break
            flat = ref.reshape(-1)
            positions = sample_positions(flat.numel(), int(sample["key"]) + i, flat.device)
            if (position, flat.device) not in on_device:
                on_device[position, flat.device] = tensors[position].to(flat.device)
            got = on_device[position, flat.device][offsets[position]:offsets[position] + positions.numel()]
            offsets[position] += positions.numel()
            position += 1
            atol, rtol = widened(tolerance(grad_tolerances if gradient and grad_tolerances else tolerances,
                                           str(ref.dtype)), allowance, i - first_gradient if gradient else None)
            want = flat[positions].to(torch.float64)
            if got.numel() != want.numel():
                reasons.append(f"{label} differs from the reference")
                continue
            pending.append((label, len(agreed)))
            agreed.append(torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True).all())
        del refs  # gone before the next call's outputs are made: one set on the device, not two
        said.append((pending, reasons))
    read = torch.stack([a.to(agreed[0].device) for a in agreed]).tolist() if agreed else []
    result = CheckResult(True, trials=len(samples))
    failed: list[int] = []
    for number, (pending, reasons) in enumerate(said, 1):
        told = [f"{label} differs from the reference" for label, index in pending if not read[index]] + reasons
        if told:
            failed.append(number - 1)
            if result.passed:
                result.passed, result.failed_trial, first = False, number, "; ".join(told)
    if failed:
        result.mismatch_share = len(failed) / max(1, len(samples))
        result.reasons.append(f"{len(failed)} of {len(samples)} timed calls returned wrong outputs "
                              f"(first, call {result.failed_trial}: {first})")
    return result, failed
