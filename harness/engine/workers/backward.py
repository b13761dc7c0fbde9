"""The backward pass (--backward): a model's forward and backward as one call.

Under --backward a trial's "outputs" are a flat list: the model's outputs, then the gradient of
each floating-point input (in argument order), then the gradient of each of the reference's
parameters (the candidate's matched to them as their values are copied: by order and shape).
Both processes draw the upstream gradient of each output from the trial's seed, so they agree
on a trial by exchanging that seed alone, and every check and re-check of outputs applies to
the gradients unchanged.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch

from ...results import as_list
from ..timing.clock import Entry

# the upstream gradients' seeds are the trial's, moved off the one its inputs are drawn from
UPSTREAM_SALT = 0x5DEECE66D

Meta = Optional[tuple[tuple[int, ...], torch.dtype]]  # an output's shape and dtype; None: it has no gradient


def is_leaf_input(value: Any) -> bool:
    """A forward argument that gets a gradient: a floating-point tensor."""
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def leaves(inputs: list) -> list:
    """The inputs, the floating-point tensors as fresh leaves that require a gradient (same storage)."""
    return [v.detach().requires_grad_() if is_leaf_input(v) else v for v in inputs]


def metas(outputs: list) -> list[Meta]:
    """What an upstream gradient is drawn for: each output that has a gradient."""
    return [(tuple(o.shape), o.dtype) if isinstance(o, torch.Tensor) and o.requires_grad else None for o in outputs]


def upstream_gradients(found: list[Meta], seed: int, device: torch.device) -> list[Optional[torch.Tensor]]:
    """Per output, the gradient flowing into it from above, from the trial's seed: output i's from
    a generator of its own, so an output without a gradient moves no other's draw."""
    grads: list[Optional[torch.Tensor]] = []
    for i, meta in enumerate(found):
        if meta is None:
            grads.append(None)
            continue
        generator = torch.Generator(device=device).manual_seed((seed ^ UPSTREAM_SALT) + i)
        shape, dtype = meta
        grads.append(torch.randn(shape, generator=generator, dtype=torch.float32, device=device).to(dtype))
    return grads


class Training:
    """`fn`'s forward and backward as one call. `params`: per reference parameter with a gradient,
    the model's own parameter matched to it and the reference's shape (None: the model has none)."""

    def __init__(self, fn: Callable, params: list[tuple[Optional[torch.nn.Parameter], torch.Size]]):
        self.fn, self.params = fn, params

    def forward(self, args: list) -> list:
        with torch.enable_grad():
            return as_list(self.fn(*args))

    def backward(self, args: list, outputs: list, upstream: list) -> list:
        """Outputs (detached), then the gradients of the float inputs and of the parameters."""
        pairs = [(o, g) for o, g in zip(outputs, upstream)
                 if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        grads = [v.grad for v in args if is_leaf_input(v)]
        grads += [None if p is None or p.grad is None else p.grad.reshape(shape) for p, shape in self.params]
        return [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs] + grads

    def __call__(self, args: list, upstream: list) -> list:
        return self.backward(args, self.forward(args), upstream)

    def clear(self) -> None:
        """The parameters' gradients go, so the next backward writes fresh ones, not sums."""
        for p, _ in self.params:
            if p is not None:
                p.grad = None


def reference_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters whose gradients are checked, named as the reference names them."""
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def own_parameters(model: torch.nn.Module) -> list[tuple[Optional[torch.nn.Parameter], torch.Size]]:
    return [(p, p.shape) for _, p in reference_parameters(model)]


def labels(outputs: int, inputs: list, params: list[str]) -> list[str]:
    """Each entry of the flat list, as a failure names it."""
    names = [f"output {i}" for i in range(outputs)] if outputs > 1 else ["the output"]
    names += [f"gradient of input {i}" for i, v in enumerate(inputs) if is_leaf_input(v)]
    return names + [f"gradient of parameter {name}" for name in params]


class TrainArgs:
    """A timed call's arguments under --backward, made outside the clock's window: fresh inputs
    (`make_inputs`) as leaves, the upstream gradients of that seed, and the parameters' gradients
    of the call before cleared."""

    def __init__(self, make_inputs: Callable[[int], list], found: list[Meta], device: torch.device,
                 training: Training):
        self.make_inputs, self.found, self.device, self.training = make_inputs, found, device, training

    def __call__(self, seed: int) -> list:
        self.training.clear()
        return [leaves(self.make_inputs(seed)), upstream_gradients(self.found, seed, self.device)]


def trial(training: Training, inputs: list, seed: int, device: torch.device, digest: Callable,
          changed: Callable) -> tuple[list, list[int]]:
    """One check trial's flat list (outputs, then gradients), and the outputs whose upstream
    gradient the backward changed in place (`digest`, `changed`: integrity.digest's)."""
    args = leaves(inputs)
    training.clear()
    outputs = training.forward(args)
    upstream = upstream_gradients(metas(outputs), seed, device)
    before = digest(upstream)
    found = training.backward(args, outputs, upstream)
    training.clear()  # the list holds the gradients; the model lets go of them
    return found, changed(before, digest(upstream))


def timed(make_inputs: Callable[[int], list], fn: Callable, params: list, found: list[Meta], device: torch.device,
          observe: Optional[Callable] = None, wrap: Callable[[Callable], Callable] = lambda f: f) -> Entry:
    """A timing entry for `fn`'s forward and backward; `wrap` goes around the whole call (the
    default float32 settings apply to the backward too)."""
    training = Training(fn, params)
    return Entry(TrainArgs(make_inputs, found, device, training), wrap(training), observe)


# A gradient that sums over the batch (a weight's: over every position of every sample) carries
# float32 rounding that grows with the sum's length, and two right computations that sum in other
# orders (cuDNN's weight-gradient algorithms add with atomics) differ by more than the outputs'
# atol: a copy of a 2D convolution missed 1e-4 by 1.5e-4. So where the problem sets no gradient
# tolerance, each gradient's atol gains ROUNDING_FACTOR times the float32 reference's own largest
# error against the same reference in float64, on one draw: a candidate is held to the reference's
# own accuracy, with room for a second order of summation and another draw. Never more than
# ROUNDING_CAP of the gradient's largest magnitude: beyond that the float32 reference is no yardstick.
ROUNDING_FACTOR = 4.0
ROUNDING_CAP = 0.01


def _flat(model: torch.nn.Module, inputs: list, seed: int, device: torch.device) -> list:
    """A check trial's flat list for `model`, nothing digested."""
    return trial(Training(model, own_parameters(model)), inputs, seed, device, lambda _: None, lambda *_: [])[0]


def rounding_allowance(reference: torch.nn.Module, inputs: list, seed: int, device: torch.device,
                       first_gradient: int) -> list[float]:
    """Per gradient entry, what its atol gains: ROUNDING_FACTOR x max |float32 - float64| of the
    reference's gradient on these inputs, capped (see ROUNDING_FACTOR). The reference's state
    (running statistics) moves: the caller restores it. Raises what the float64 copy raises
    (out of memory, a module that cannot be copied)."""
    single = _flat(reference, inputs, seed, device)[first_gradient:]
    double = copy.deepcopy(reference).double()
    exact = _flat(double, [v.double() if is_leaf_input(v) else v for v in inputs], seed, device)[first_gradient:]
    del double
    allowance = []
    for got, want in zip(single, exact):
        if not (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)) or got.numel() == 0:
            allowance.append(0.0)
            continue
        error = float((got.double() - want).abs().max())
        allowance.append(min(ROUNDING_FACTOR * error, ROUNDING_CAP * float(want.abs().max())))
    return allowance


def output_metas(fn: Callable, inputs: list) -> list[Meta]:
    """What the upstream gradients of timed calls are drawn for: `fn`'s outputs on these inputs."""
    return metas(Training(fn, []).forward(leaves(inputs)))
