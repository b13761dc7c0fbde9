"""The settings a run was started with and the evaluation options it used, as run.json
records them.

Resolved from flags and a TOML file by cli/config.py; kept here so the run
store can read and write them without reaching up into the command line.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Optional

from ..engine.stopping import DEFAULT as DEFAULT_STOP
from ..tokens import Tokens

if TYPE_CHECKING:
    from ..engine.options import EvalOptions

@dataclass
class Settings:
    problem: str = ""
    proposer: str = "human"  # a kind's name (loop/proposers/kinds.py)
    model: Optional[str] = None
    base_url: Optional[str] = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    # "max_completion_tokens" for reasoning models on OpenAI's API (found by itself on the first refusal)
    token_param: Optional[str] = None
    reasoning_effort: Optional[str] = None  # low, medium, high: sent only when set
    extra_body: dict = field(default_factory=dict)  # further request fields, such as top_k for vLLM
    # USD per million tokens: prompt, cached (prompt tokens from the prefix cache), completion
    prices: dict = field(default_factory=dict)
    # A reasoning model may think for several minutes before its first byte, so one attempt
    # gets 10 minutes; two retries ride out a restart or a rate limit, while a dead or hanging
    # endpoint still fails in about half an hour (3 x 10 min), not hours.
    request_timeout: float = 600.0  # seconds per attempt
    max_retries: int = 2  # on rate limits, timeouts and 5xx, with backoff
    # A 429 or 5xx left after the retries is waited out, doubling waits from 30 s, this long in all:
    # a restart or a busy spell passes, a broken server ends the run in minutes, not half an hour.
    retry_for: float = 300.0
    stream: bool = False  # ask for the answer as server-sent events
    rounds: Optional[int] = 10  # None: no limit (a person at an editor stops with Ctrl-C)
    accept: float = 1.5
    target: float = 2.0
    # the acceptable speedup a --target below it lowered `accept` from; None: accept stands as given.
    # Kept so that a resume knows the bar, and says it is lowered, as the start did.
    accept_lowered_from: Optional[float] = None
    samples: int = 1
    beam: int = 0  # the best correct candidates kept as parents; 0: one chain from the best
    wall_time: Optional[float] = None  # seconds
    token_budget: Optional[int] = None
    budget_usd: Optional[float] = None  # needs prices
    window: int = 4  # past rounds kept in the conversation; 0 keeps all
    restart_after: int = 3  # rounds without a measurable gain before restarting from the best; 0: never
    plateau: int = 6  # rounds without a measurable gain that end the run; 0: never
    device: str = "cuda"
    prompts: Optional[str] = None
    runs_dir: str = "runs"
    files: list[str] = field(default_factory=list)
    command: Optional[str] = None  # the command proposer's program and its arguments, as a shell would take them
    # the model is asked to break the judge; each candidate the fast verdict passes is audited (loop/red_team.py)
    red_team: bool = False
    config: Optional[str] = None


PRICE_KINDS = ("prompt", "cached", "completion")


def cost_usd(tokens: Tokens, prices: dict) -> Optional[float]:
    """What the tokens cost at `prices`; None without a price table. Cached prompt tokens
    cost the cached price (the prompt price where none is given); reasoning is completion."""
    if not prices:
        return None
    cached = prices.get("cached", prices.get("prompt", 0.0))
    return ((tokens.prompt - tokens.cached) * prices.get("prompt", 0.0) + tokens.cached * cached
            + tokens.completion * prices.get("completion", 0.0)) / 1e6


@dataclass
class Evaluation:
    """The evaluation options a run used: `--resume` takes them again unless a flag overrides one.
    (The device is one of the Settings.)"""

    trials: int = 5
    time_cap: float = 10.0
    policy: str = "warn"
    shapes: str = "warn"  # other shapes: warn, strict or off
    compile_baseline: bool = False
    model_mode: str = "train"  # "eval": both models in eval() (inference kernels)
    backward: bool = False  # forward and backward checked and timed (EvalOptions.backward)
    gpus: Optional[list[int]] = None  # physical indices; None: one GPU, the first no other harness process times on
    profile: bool = False  # each correct candidate profiled, the kernels and findings fed back
    profile_kernel: Optional[str] = None  # ncu's --kernel-name regex; None: every kernel
    atol: Optional[float] = None  # --atol/--rtol: allclose tolerances for every dtype; None: the problem's
    rtol: Optional[float] = None
    clock: str = "gpu"  # the headline clock on a GPU (EvalOptions.clock)
    stop: str = DEFAULT_STOP  # the stopping criterion (EvalOptions.stop)
    stop_target: Optional[float] = None  # its threshold; None: the criterion's default

    def options(self, base: "EvalOptions") -> "EvalOptions":
        """`base` (the device, limits and cache, which a run does not record) evaluating as these say."""
        return replace(base, trials=self.trials, time_cap=self.time_cap, policy=self.policy, shapes=self.shapes,
                       compile_baseline=self.compile_baseline, model_mode=self.model_mode, backward=self.backward,
                       profile=self.profile, profile_kernel=self.profile_kernel, atol=self.atol, rtol=self.rtol,
                       clock=self.clock, stop=self.stop, stop_target=self.stop_target)
