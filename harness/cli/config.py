"""Settings of a run: command-line flags over an optional TOML file over defaults;
and the evaluation flags every evaluating command shares.

The TOML file has up to three tables:

    [endpoint]   base_url, model, api_key_env, temperature, max_tokens, token_param,
                 reasoning_effort, extra_body (a table of request fields), prices
                 (USD per million tokens: prompt, cached, completion),
                 request_timeout, max_retries, retry_for, stream
    [limits]     rounds, accept, target, samples, beam, wall_time, token_budget, budget_usd,
                 window, restart_after, plateau
    [run]        proposer, command, device, prompts, runs_dir, red_team

API keys are read only from the environment (the variable named by
`api_key_env`, OPENAI_API_KEY by default), never from a file, and are never
part of `Settings`, so they cannot reach runs/.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Callable, Optional

import tomllib

from ..device import default_device, physical_gpu, require_cuda, visible_gpus
from ..engine.processes.child import MAX_PROCESSES
from ..engine.processes.device_lock import device_key, held_devices, pick_gpu
from ..engine.options import EvalOptions
from ..engine.stopping import CRITERIA
from ..errors import HarnessError
from ..loop.proposers import kinds
from ..runs.settings import PRICE_KINDS, Evaluation, Settings


class ConfigError(HarnessError):
    """Settings that cannot be used; the message is one paragraph for a person."""


_TABLES = {
    "endpoint": ("base_url", "model", "api_key_env", "temperature", "max_tokens", "token_param",
                 "reasoning_effort", "extra_body", "prices", "request_timeout", "max_retries",
                 "retry_for", "stream"),
    "limits": ("rounds", "accept", "target", "samples", "beam", "wall_time", "token_budget", "budget_usd",
               "window", "restart_after", "plateau"),
    "run": ("proposer", "command", "device", "prompts", "runs_dir", "red_team"),
}
_TYPES = {f.name: f.type for f in fields(Settings)}
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*$")


def parse_duration(value: Any) -> float:
    """Seconds from 90, "90", "90s", "30m" or "2h"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"`{value}` is not a duration such as 600, 30m or 2h")
    scale = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[match.group(2)]
    return float(match.group(1)) * scale


def _coerce(name: str, value: Any) -> Any:
    kind = _TYPES[name]
    if name in ("wall_time", "request_timeout", "retry_for"):
        return parse_duration(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, not `{value}`")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            raise ValueError(f"{name} must be a table such as {{ top_k = 20 }}, not `{value}`")
        return value
    if "int" in kind and "float" not in kind:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, not `{value}`")
        return value
    if "float" in kind:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, not `{value}`")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not `{value}`")
    return value


def load_config(path: str | Path) -> dict[str, Any]:
    """The settings a TOML file gives, by name, checked and typed."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"Config file {path} cannot be read: {exc.strerror or exc}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}.") from None
    values: dict[str, Any] = {}
    for table, content in data.items():
        if table not in _TABLES or not isinstance(content, dict):
            raise ConfigError(
                f"Config file {path} has `{table}` at the top level; it may hold only the tables "
                f"{', '.join('[' + t + ']' for t in _TABLES)}.")
        for key, value in content.items():
            if key == "api_key":
                raise ConfigError(
                    f"Config file {path} holds an API key in [{table}]. Keys are read only from the "
                    "environment so that they never land in files: remove it, export the key and "
                    "name its variable with `api_key_env = \"NAME\"` (OPENAI_API_KEY by default).")
            if key not in _TABLES[table]:
                raise ConfigError(
                    f"Config file {path} has an unknown key `{key}` in [{table}]; that table "
                    f"takes {', '.join(_TABLES[table])}.")
            try:
                values[key] = _coerce(key, value)
            except ValueError as exc:
                raise ConfigError(f"Config file {path}, [{table}]: {exc}.") from None
    return values


NO_PROPOSER = ("Nothing says where candidates come from: no model is configured (no --model, no `model` in a "
               "--config file's [endpoint] table, no $OPENAI_BASE_URL) and no --files or --command are given. To "
               "optimize with a model, name it: `--model NAME` for OpenAI (the key from $OPENAI_API_KEY), with "
               "`--base-url http://localhost:8000/v1` for a local vLLM or `--base-url http://localhost:11434/v1` "
               "for Ollama (no key needed); or write them in a TOML file's [endpoint] table and pass --config FILE. "
               "To write the candidates yourself, pass --proposer human; to evaluate candidates you have, --files "
               "F ...; to have a program of yours answer each prompt (the prompt on its stdin, the answer on its "
               "stdout), --command \"PROGRAM ARGS\". "
               "--dry-run prints the first prompt without any of these.")


def resolve(flags: dict[str, Any], base: Optional[Settings] = None, *, dry_run: bool = False) -> Settings:
    """Settings from flags (None where not given) over the config file over `base`.

    `base` is a resumed run's stored settings; without it, defaults apply and the
    endpoint falls back to OPENAI_BASE_URL, the proposer to the one the settings imply
    (kinds.implied: `files` where files are given, `openai` where an endpoint or model is
    configured); with none, nothing is chosen for the person (NO_PROPOSER says how to
    choose). A dry run asks no proposer, so it needs none, nor a model.
    """
    # A resumed run's settings already hold what its config file said.
    from_file = load_config(flags["config"]) if flags.get("config") else {}
    given = {k: v for k, v in flags.items() if v is not None and k in _TYPES}
    settings = Settings(**{**(vars(base) if base else {}), **from_file, **given})
    if base is None:
        settings.base_url = settings.base_url or os.environ.get("OPENAI_BASE_URL") or None
        if "proposer" not in given and "proposer" not in from_file:
            implied = kinds.implied(settings)
            settings.proposer = implied.name if implied else ""
            if not settings.proposer and not dry_run:
                raise ConfigError(NO_PROPOSER)
        kind = kinds.find(settings.proposer)
        if kind and kind.attended and "rounds" not in given and "rounds" not in from_file:
            settings.rounds = None
        if "device" not in given and "device" not in from_file:
            settings.device = default_device()
    if "accept" in given or "accept" in from_file:
        settings.accept_lowered_from = None
    else:  # a target below the bar is the bar (accept_note says so); a resumed run's bar is the one it lowered
        bar = settings.accept_lowered_from or settings.accept
        settings.accept, settings.accept_lowered_from = (settings.target, bar) if 0 < settings.target < bar \
            else (bar, None)
    check(settings, dry_run)
    require_cuda(settings.device)
    return settings


def proposer_reason(flags: dict[str, Any], settings: Settings) -> str:
    """Why the run's proposer is the one it is, for the line that starts the run."""
    from_file = load_config(flags["config"]) if flags.get("config") else {}
    if flags.get("proposer"):
        return "asked for with --proposer"
    if "proposer" in from_file:
        return f"asked for in {flags['config']}"
    kind = kinds.get(settings.proposer)
    reason = kind.implied(settings) or ""
    if not kind.asks_model:
        return reason
    named = [f"--{name.replace('_', '-')}" for name in ("model", "base_url") if flags.get(name)]
    named += [f"`{name}` in {flags['config']}" for name in ("model", "base_url") if name in from_file]
    return f"{reason}: " + (", ".join(named) or "$OPENAI_BASE_URL")


def accept_note(settings: Settings) -> str:
    """A line where resolve() lowered the acceptable speedup to a --target below it: said when a run
    starts and again when it is resumed, the lowered bar still standing."""
    if settings.accept_lowered_from is None:
        return ""
    return (f"--target {settings.target:g} is below the acceptable {settings.accept_lowered_from:g}x, so the "
            f"acceptable speedup is {settings.accept:g}x too (give --accept to set it apart).")


def check(s: Settings, dry_run: bool = False) -> None:
    problems = []
    kind = kinds.find(s.proposer)
    if kind:
        problems += kind.check(s, dry_run)
    elif not (dry_run and not s.proposer):
        problems.append(f"--proposer must be one of {', '.join(kinds.names())}, not `{s.proposer}`")
    if s.rounds is not None and s.rounds < 1:
        problems.append(f"--rounds must be at least 1, not {s.rounds}")
    if s.samples < 1:
        problems.append(f"--samples must be at least 1, not {s.samples}")
    if kind and kind.attended and s.samples != 1:
        problems.append(f"the {kind.name} proposer writes one candidate per round: leave --samples at 1")
    if not 0 < s.accept <= s.target:
        fix = (f": lower --accept to {s.target:g} or less, or raise --target to {s.accept:g} or more"
               if 0 < s.target < s.accept else "")
        problems.append(f"need 0 < --accept <= --target, got accept {s.accept:g} and target {s.target:g}{fix}")
    if s.red_team and s.beam:
        problems.append("--beam keeps the fastest candidates to build on, which an attack on the judge does not "
                        "do: leave it at 0 with --red-team")
    if s.beam < 0:
        problems.append(f"--beam must be 0 (one chain from the best) or more, not {s.beam}")
    if s.window < 0:
        problems.append(f"--window must be 0 (keep all) or more, not {s.window}")
    for name in ("restart_after", "plateau"):
        if getattr(s, name) < 0:
            problems.append(f"--{name.replace('_', '-')} must be 0 (never) or more, not {getattr(s, name)}")
    if s.device != "cpu" and not s.device.startswith("cuda"):
        problems.append(f"--device must be cpu or cuda (cuda:N), not `{s.device}`")
    if s.token_param not in (None, "max_tokens", "max_completion_tokens"):
        problems.append(f"token_param must be max_tokens or max_completion_tokens, not `{s.token_param}`")
    unknown = set(s.prices) - set(PRICE_KINDS)
    if unknown or not all(isinstance(v, (int, float)) and v >= 0 for v in s.prices.values()):
        problems.append(f"prices takes {', '.join(PRICE_KINDS)} in USD per million tokens, each a number "
                        f"0 or more; got {s.prices}")
    if s.budget_usd is not None and not s.prices:
        problems.append("--budget-usd needs a price table: `prices = { prompt = 1.25, completion = 10.0 }` "
                        "in the config's [endpoint]")
    for name in ("wall_time", "token_budget", "max_tokens", "request_timeout", "budget_usd"):
        value = getattr(s, name)
        if value is not None and value <= 0:
            problems.append(f"--{name.replace('_', '-')} must be positive, not {value}")
    if s.retry_for < 0:
        problems.append(f"--retry-for must be 0 (no waiting) or more, not {s.retry_for}")
    if s.max_retries < 0:
        problems.append(f"--max-retries must be 0 or more, not {s.max_retries}")
    if problems:
        raise ConfigError("Cannot start the run: " + "; ".join(problems) + ".")


def number(kind: type, low: float, *, above: bool = False, duration: bool = False) -> Callable[[str], Any]:
    """An argparse type: a `kind` at least `low` (above it, with `above`), else a one-line reason.
    `duration` also takes 30m or 2h."""
    bound = f"above {low:g}" if above else f"at least {low:g}"
    noun = "a duration such as 600, 30m or 2h" if duration else \
        "a whole number" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = parse_duration(text) if duration else kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {noun}, not `{text}`") from None
        if value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be {bound}, not {text}")
        return value

    return parse


POSITIVE, COUNT, SECONDS = number(float, 0, above=True), number(int, 1), number(float, 0, above=True, duration=True)


def device_choice(text: str) -> str:
    """An argparse type: cpu, cuda or cuda:N."""
    if text in ("cpu", "cuda") or re.fullmatch(r"cuda:\d+", text):
        return text
    raise argparse.ArgumentTypeError(f"must be cpu, cuda or cuda:N (N a GPU's index), not `{text}`")


def pin_gpu(args: argparse.Namespace) -> None:
    """--device cuda:N as --device cuda on GPU N: through --gpus where the command has it, else by narrowing
    CUDA_VISIBLE_DEVICES for every process the command starts (the harness itself never initialises CUDA)."""
    chosen = getattr(args, "device", None)
    if not chosen or ":" not in chosen:
        return
    gpu = physical_gpu(int(chosen.split(":")[1]))
    args.device = "cuda"
    if not hasattr(args, "gpus"):
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    elif args.gpus and parse_gpus(args.gpus) != [gpu]:
        raise ConfigError(f"--device {chosen} and --gpus {args.gpus} name different GPUs: give one of them.")
    else:
        args.gpus = str(gpu)


def add_eval_options(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that evaluates candidates."""
    parser.add_argument("--device", type=device_choice, default=None, metavar="cuda|cuda:N|cpu",
                        help="where to run; cuda:N is GPU N, as --gpus N (default: cuda when a GPU is present)")
    parser.add_argument("--trials", type=COUNT, metavar="N",
                        help="correctness trials, each with fresh inputs (default 5)")
    parser.add_argument("--build-timeout", type=SECONDS, default=900.0, metavar="S",
                        help="seconds a candidate's build may take; past them the verdict is timeout (default 900)")
    parser.add_argument("--run-timeout", type=SECONDS, default=600.0, metavar="S",
                        help="seconds the checks, and each later step of a candidate's evaluation, may take; past "
                             "them the verdict is timeout (default 600)")
    parser.add_argument("--time-cap", type=SECONDS, metavar="S", help="most seconds spent sampling times (default 10)")
    parser.add_argument("--stop", choices=list(CRITERIA), default=None,
                        help="when a timing has sampled enough (within the time cap): interval, once any two "
                             "medians' ratio is known within ±1%% on a GPU, ±3%% on a CPU (default); settled, once "
                             "every median's standard error is under 0.5%% (2%%) and it no longer drifts; rel-se, "
                             "once every median's standard error is under 0.2%% (1%%); cap, never before the time cap "
                             "(see docs/methodology.md)")
    parser.add_argument("--stop-target", type=number(float, 0), default=None, metavar="T",
                        help="the --stop criterion's threshold, relative (e.g. 0.005 for ±0.5%%)")
    parser.add_argument("--compile-baseline", action="store_true", default=None,
                        help="also time torch.compile(Model)")
    parser.add_argument("--clock", choices=["gpu", "latency"], default=None,
                        help="the headline on a GPU: gpu, GPU time with calls queued as do_bench queues them "
                             "(default), or latency, a synchronize after each call as KernelBench's timer does "
                             "(launch overhead counts); both are measured and shown either way")
    parser.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                        help="build cache (default ~/.cache/harness)")
    parser.add_argument("--policy", choices=["warn", "strict"],
                        help="strict: refuse candidates that call the reference op, torch.compile, fall back to "
                             "torch, or launch no kernel (default: warn)")
    parser.add_argument("--model-mode", choices=["train", "eval"], default=None,
                        help="train: both models run in the mode they are constructed in, training, as KernelBench "
                             "runs them (BatchNorm on batch statistics, dropout active); eval: both in eval(), "
                             "for inference kernels (default: train)")
    parser.add_argument("--backward", action="store_true", default=None,
                        help="check and time the backward pass too: gradients of the float inputs and the "
                             "parameters, and forward plus backward as one timed call (a problem's "
                             "BACKWARD = True sets it; see docs/backward.md)")
    parser.add_argument("--shapes", choices=["warn", "strict", "off"],
                        help="other shapes than the main one: warn on a failure (default), strict: reject, off: skip")
    parser.add_argument("--atol", type=number(float, 0), default=None, metavar="A",
                        help="absolute tolerance of the check, for every dtype, over the problem's ATOL (default: "
                             "1e-4 for float32, 1e-2 for half precision; KernelBench's leaderboard used 1e-2)")
    parser.add_argument("--rtol", type=number(float, 0), default=None, metavar="R",
                        help="relative tolerance of the check, for every dtype, over the problem's RTOL")
    parser.add_argument("--gpus", default=None, metavar="0,1", help="GPUs to time on, one candidate at a time each")
    parser.add_argument("--jobs", type=COUNT, default=None, metavar="N",
                        help="builds at once (default: one per core, less those kept for timing on a GPU host of "
                             "4 cores or more: 2 per GPU, at most half; fewer where host memory is short, 4 GB a "
                             "build)")
    parser.add_argument("--max-host-memory", type=parse_size, default=None, metavar="SIZE",
                        help="host memory a candidate's processes may hold together, e.g. 8G (default: half the "
                             "machine's, leaving at least 4 GiB to the rest)")
    parser.add_argument("--max-processes", type=COUNT, default=MAX_PROCESSES, metavar="N",
                        help=f"processes a candidate may run at once (default {MAX_PROCESSES})")


def eval_options(args: argparse.Namespace, evaluation: Optional[Evaluation] = None) -> EvalOptions:
    """EvalOptions from the flags; `evaluation` (a run's) fills what they leave out, defaults the rest. A
    --clock given for a CPU is said, on stderr, to change nothing there."""
    evaluation = evaluation or evaluation_options(args)[0]
    device = args.device or default_device()
    if device == "cpu" and getattr(args, "clock", None):
        print(f"note: --clock {args.clock} has no effect on a CPU: a CPU has one clock, the host's time per call, "
              "and every speedup there is read on it.", file=sys.stderr)
    return evaluation.options(EvalOptions(device=device, build_timeout=args.build_timeout,
                                          run_timeout=args.run_timeout, cache_dir=args.cache_dir,
                                          max_host_memory=args.max_host_memory, max_processes=args.max_processes))


def take_free_gpu(options: EvalOptions, gpus: Optional[list[int]], say: Callable[[str], None]) -> EvalOptions:
    """`options` on a GPU no other harness process is timing on, where none is pinned (by `gpus`,
    --device cuda:N, or CUDA_VISIBLE_DEVICES leaving one), with `say` told when it is not simply the
    first. Chosen once, at the start, so the reference process and every worker share it."""
    visible = visible_gpus() if not gpus and options.device == "cuda" else []
    if len(visible) < 2:
        return options
    keys = {device_key("cuda", gpu): gpu for gpu in visible}
    held = {keys[key]: pid for key, pid in held_devices(options.resolved_cache(), keys).items()}
    gpu, reason = pick_gpu(visible, held)
    if reason:
        say(reason)
    return replace(options, gpu=gpu)


def evaluation_options(args: argparse.Namespace, recorded: Optional[Evaluation] = None
                       ) -> tuple[Evaluation, list[str], list[str]]:
    """The evaluation options: flags over `recorded` (a resumed run's) over defaults. Also the
    names taken from the record, and the names a flag overrode."""
    base = recorded or Evaluation()
    given = {"trials": args.trials, "time_cap": args.time_cap, "policy": args.policy, "shapes": args.shapes,
             "compile_baseline": args.compile_baseline, "model_mode": args.model_mode,
             "backward": args.backward, "clock": args.clock, "stop": args.stop, "stop_target": args.stop_target,
             "gpus": parse_gpus(args.gpus), "atol": args.atol, "rtol": args.rtol,
             # harness run's flags alone; other commands never profile
             "profile": getattr(args, "profile", None), "profile_kernel": getattr(args, "profile_kernel", None)}
    values, kept, overridden = {}, [], []
    for name, flag in given.items():
        if flag is None:
            values[name] = getattr(base, name)
            kept += [name] if recorded else []
        else:
            values[name] = flag
            overridden += [name] if recorded else []
    return Evaluation(**values), kept, overridden


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from 8G, 512M, 1.5GiB or a plain number of bytes."""
    match = _SIZE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"`{text}` is not a positive size such as 8G or 512M")
    return int(float(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper() or " "))


def parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--gpus takes GPU indices separated by commas, like 0,1; got {text!r}.") from None
