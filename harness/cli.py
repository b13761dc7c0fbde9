"""The `harness` command: a thin layer over the Python API."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from .problem import ProblemError

USAGE_ERROR = 2


def default_device() -> str:
    import torch

    from .build import nvidia_smi

    return "cuda" if torch.backends.cuda.is_built() and nvidia_smi("name") else "cpu"


def add_eval_options(parser: argparse.ArgumentParser) -> None:
    """Flags shared by every command that evaluates candidates."""
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="where to run (default: cuda when a GPU is present)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials, each with fresh inputs")
    parser.add_argument("--build-timeout", type=float, default=900.0, metavar="S")
    parser.add_argument("--run-timeout", type=float, default=600.0, metavar="S")
    parser.add_argument("--time-cap", type=float, default=10.0, metavar="S",
                        help="most seconds spent sampling times")
    parser.add_argument("--compile-baseline", action="store_true", help="also time torch.compile(Model)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="build cache (default ~/.cache/harness)")
    parser.add_argument("--policy", choices=["warn", "strict"], default="warn",
                        help="strict: refuse candidates that call the reference op, torch.compile, fall back to "
                             "torch, or launch no kernel (default: warn)")
    parser.add_argument("--gpus", default=None, metavar="0,1", help="GPUs to time on, one candidate at a time each")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="builds at once (default: half the cores)")


def eval_options(args: argparse.Namespace):
    from .evaluate import EvalOptions

    return EvalOptions(device=args.device or default_device(), trials=args.trials,
                       build_timeout=args.build_timeout, run_timeout=args.run_timeout,
                       time_cap=args.time_cap, compile_baseline=args.compile_baseline,
                       cache_dir=args.cache_dir, policy=args.policy)


def parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SystemExit(f"--gpus takes GPU indices separated by commas, like 0,1; got {text!r}") from None


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    from rich.live import Live

    from .pool import evaluate_many
    from .report import phase_table, print_result
    from .results import to_dict

    for candidate in args.candidates:
        if not Path(candidate).is_file():
            console.print(f"[red]Candidate file {candidate} does not exist or is not a file.[/red]")
            return USAGE_ERROR
    phases = ["waiting"] * len(args.candidates)
    with Live(phase_table(args.candidates, phases), console=console, transient=True) as live:
        def on_event(index: int, phase: str) -> None:
            phases[index] = phase
            live.update(phase_table(args.candidates, phases))

        results = evaluate_many(args.problem, args.candidates, eval_options(args), parse_gpus(args.gpus),
                                args.jobs, on_event)
    for result in results:
        print_result(console, result)
    if args.json:
        payload = to_dict(results[0]) if len(results) == 1 else [to_dict(r) for r in results]
        args.json.write_text(json.dumps(payload, indent=2))
    return 0 if all(r.ok for r in results) else 1


def cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    """Exit 0 when everything the device needs is present, 1 otherwise."""
    from .doctor import diagnose, print_diagnosis
    from .results import to_dict

    if args.prepare:
        console.print("Preparing torch's precompiled header (about 45 s when it has to be built) ...")
    diagnosis = diagnose(args.device, args.cache_dir, prepare=args.prepare)
    print_diagnosis(console, diagnosis)
    if args.json:
        args.json.write_text(json.dumps({**to_dict(diagnosis), "ok": diagnosis.ok}, indent=2))
    return 0 if diagnosis.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = commands.add_parser("eval", help="evaluate candidate(s) against a problem: one verdict each")
    p.add_argument("problem", help="problem file (KernelBench format)")
    p.add_argument("candidates", nargs="+", metavar="candidate", help="candidate file(s) defining ModelNew")
    p.add_argument("--json", type=Path, default=None, metavar="OUT",
                   help="write the full result as JSON (a list when there are several candidates)")
    add_eval_options(p)
    p.set_defaults(handler=cmd_eval)
    p = commands.add_parser("doctor", help="check GPUs, torch, compilers and the build cache; say how to fix "
                            "what is missing (exit 1 when something the device needs is missing)")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None,
                   help="what to check for (default: cuda when a GPU is present)")
    p.add_argument("--cache-dir", type=Path, default=None, help="build cache (default ~/.cache/harness)")
    p.add_argument("--prepare", action="store_true",
                   help="build torch's precompiled header now (about 45 s, once per torch install)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the findings as JSON")
    p.set_defaults(handler=cmd_doctor)

    from .run_command import DESCRIPTION, EPILOG, add_run_arguments, run_main

    p = commands.add_parser("run", help="the optimization loop: propose, evaluate, feed back, repeat",
                            description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.set_defaults(handler=run_main)
    return parser


def main(argv: list[str] | None = None) -> int:
    console = Console()
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args, console)
    except ProblemError as exc:
        console.print(f"[red]{exc}[/red]")
        return USAGE_ERROR
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/yellow]")
        return 130
