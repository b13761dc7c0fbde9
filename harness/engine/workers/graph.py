"""The CUDA graph check's capture (checking/trials.py's check_graph): the candidate's forward captured
once on static inputs and replayed on each request's, as a serving stack replays it."""
from __future__ import annotations

import torch

from .memory import free_cache


class NotCapturable(Exception):
    """The candidate's forward could not be captured in a CUDA graph; the message says why."""


def _release_generator() -> None:
    """A capture that fails leaves the CUDA generator counting itself mid-capture (PyTorch ends the
    count only when a capture completes), and every later random draw on the device then raises
    "Offset increment outside graph capture": a fresh state at the same seed and offset ends it."""
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    generator.graphsafe_set_state(generator.clone_state())


class CapturedForward:
    """The candidate's forward captured once in a CUDA graph on static inputs; each replay
    copies new inputs into them first, as a serving stack does."""

    def __init__(self, model: torch.nn.Module, inputs: list):
        self.static = inputs  # drawn for this capture alone, so no copy
        try:
            # warm-up on a side stream, as torch.cuda.graphs asks: lazy inits stay out of the capture
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                model(*self.static)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            free_cache(torch.device("cuda"))  # the warm-up's outputs: the graph's own pool cannot reuse them
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph), torch.no_grad():
                self.outputs = model(*self.static)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - any failure to capture is the note's reason
            _release_generator()
            raise NotCapturable(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]) from None

    def drop_inputs(self) -> None:
        """Lets the captured inputs go; the graph reads them, so it is not replayed again."""
        self.static = None

    def replay(self, inputs: list):
        if self.static is None:
            raise RuntimeError("the CUDA graph's captured inputs are gone; it is not replayed again")
        for static, new in zip(self.static, inputs):
            if isinstance(static, torch.Tensor):
                static.copy_(new)
        self.graph.replay()
        torch.cuda.synchronize()
        return self.outputs
