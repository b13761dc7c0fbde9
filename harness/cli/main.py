"""The `harness` command: a thin layer over the Python API."""
from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import signal
import sys
import tempfile
from functools import partial
from pathlib import Path

from rich.console import Console

from ..device import default_device, refuse_cuda_only
from ..errors import HarnessError
from ..version import __version__
from .sweep import DESCRIPTION as SWEEP_DESCRIPTION, add_sweep_arguments, sweep_main
from .breaks_command import DESCRIPTION as BREAKS_DESCRIPTION, HELP as BREAKS_HELP, add_breaks_arguments, breaks_main
from .build_command import DESCRIPTION as BUILD_DESCRIPTION, HELP as BUILD_HELP, add_build_arguments, build_main
from .config import COUNT, add_eval_options, device_choice, eval_options, parse_gpus, pin_gpu, take_free_gpu
from .display import print_error
from .mcp_command import DESCRIPTION as MCP_DESCRIPTION, add_mcp_arguments, mcp_main
from .report_command import DESCRIPTION as REPORT_DESCRIPTION, add_report_arguments, report_main
from .run_command import DESCRIPTION, EPILOG, add_run_arguments, run_main

USAGE_ERROR = 2
PITCH = ("Propose, build, check and time custom GPU kernels against a PyTorch reference: evaluate a kernel, "
         "or let a model write one round after round until it is fast enough.")


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    from rich.live import Live

    from ..engine.pool import evaluate_batch
    from ..results import to_dict
    from .eval_panel import phase_table, print_result

    for candidate in args.candidates:
        if not Path(candidate).is_file():
            raise HarnessError(f"Candidate file {candidate} does not exist or is not a file.")
        if args.device is None:  # the device defaulted to cpu: say so before a doomed CUDA build
            refuse_cuda_only(f"Candidate file {candidate}", Path(candidate).read_text(errors="replace"))
    gpus = parse_gpus(args.gpus)
    options = take_free_gpu(eval_options(args), gpus,
                            partial(console.print, markup=False, highlight=False, soft_wrap=True))
    phases = ["waiting"] * len(args.candidates)
    with Live(phase_table(args.candidates, phases), console=console, transient=True) as live:
        def on_event(index: int, phase: str) -> None:
            phases[index] = phase
            live.update(phase_table(args.candidates, phases))

        results = evaluate_batch(args.problem, args.candidates, options, gpus, args.jobs, on_event)
    for result in results:
        print_result(console, result)
    if args.json:
        payload = to_dict(results[0]) if len(results) == 1 else [to_dict(r) for r in results]
        args.json.write_text(json.dumps(payload, indent=2))
    return 0 if all(r.ok for r in results) else 1


def cmd_doctor(args: argparse.Namespace, console: Console) -> int:
    """Exit 0 when everything the device needs is present, 1 otherwise."""
    from ..engine.doctor import diagnose
    from ..results import to_dict
    from .doctor import print_diagnosis

    if args.prepare:
        console.print("Preparing torch's precompiled header (about 45 s when it has to be built) ...")
    diagnosis = diagnose(args.device, args.cache_dir, prepare=args.prepare)
    print_diagnosis(console, diagnosis)
    if args.json:
        args.json.write_text(json.dumps({**to_dict(diagnosis), "ok": diagnosis.ok}, indent=2))
    return 0 if diagnosis.ok else 1


def cmd_profile(args: argparse.Namespace, console: Console) -> int:
    from ..engine.profiling.profile import ProfileRequest, profile
    from ..results import to_json
    from .profile import print_profile

    if not args.reference and not args.candidate:
        raise HarnessError("Name a candidate file to profile, or pass --reference.")
    candidate = None if args.reference else args.candidate
    for path in (args.problem, candidate):
        if path and not Path(path).is_file():
            raise HarnessError(f"{path} does not exist or is not a file.")
    if candidate and args.device is None:
        refuse_cuda_only(f"Candidate file {candidate}", Path(candidate).read_text(errors="replace"))
    device = args.device or default_device()
    result = profile(ProfileRequest(args.problem, candidate, device, args.kernel, time_limit_s=args.time_limit))
    print_profile(console, result, candidate or "the reference")
    if args.json:
        args.json.write_text(to_json(result))
    return 0


def cmd_runs(args: argparse.Namespace, console: Console) -> int:
    from .history import print_runs

    return print_runs(console, args.runs_dir, args.problem)


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    from ..runs.history import ROUND_FILES
    from .history import print_show

    file = next((name for name in ROUND_FILES if getattr(args, name)), None)
    return print_show(console, args.run, args.runs_dir, args.round, file, args.best)


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from ..export.package import export

    done = export(args.run, args.name, args.output, args.runs_dir)
    console.print(f"Wrote {done.path}: `pip install {done.path}`, then `import {done.module}` registers "
                  f"torch.ops.{done.op.replace('::', '.')}.")
    return 0


def cmd_promote(args: argparse.Namespace, console: Console) -> int:
    from ..runs.history import promote

    done = promote(args.run, args.runs_dir, args.kernels_dir, args.force)
    replaced = f", replacing a {done.replaced:.2f}x kernel" if done.replaced is not None else ""
    console.print(f"Promoted the {done.speedup:.2f}x kernel to {done.target}{replaced}.")
    return 0


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from ..runs.history import replay
    from .history import print_replay

    return print_replay(console, replay(args.run, args.runs_dir, eval_options(args), args.problem))


def cmd_audit(args: argparse.Namespace, console: Console) -> int:
    from ..sweep.audit import audit, items_of, write

    scratch = Path(tempfile.mkdtemp(prefix="harness-audit-"))
    try:
        items, out = items_of(args.target, args.runs_dir, scratch, args.top)
        if not items:
            raise HarnessError(f"{args.target} holds no candidate to audit.")
        options = take_free_gpu(eval_options(args), parse_gpus(args.gpus),
                                partial(console.print, markup=False, highlight=False, soft_wrap=True))
        console.print(f"Auditing {len(items)} verdict(s) of {args.target}, every invariant at its strictest, in "
                      "processes of the audit's own.", markup=False, highlight=False, soft_wrap=True)
        records = audit(items, options, lambda r: console.print(r.line, markup=False, highlight=False,
                                                                 soft_wrap=True))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    write(records, args.output or out)
    disagree = sum(not r.agree for r in records)
    fast = [r.fast_seconds for r in records if r.fast_seconds]
    cost = (f"; {sum(r.audit_seconds for r in records) / sum(fast):.1f}x the fast verdicts' time"
            if len(fast) == len(records) and sum(fast) else "")
    console.print(f"{len(records) - disagree} agree, {disagree} disagree{cost}; written to {args.output or out}.",
                  markup=False, highlight=False, soft_wrap=True)
    return 1 if disagree else 0


def cmd_plot(args: argparse.Namespace, console: Console) -> int:
    from ..runs.plot import plot

    drawn = plot(args.runs, args.runs_dir, args.output)
    console.print(f"Wrote {drawn.path}: {len(drawn.runs)} run(s) of {drawn.problem}.")
    return 0


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from .history import print_compare

    return print_compare(console, args.run_a, args.run_b, args.runs_dir)


# Commands that were renamed: a script still calling the old name is told the new one.
RENAMED = {"bench": "sweep"}


class Parser(argparse.ArgumentParser):
    """argparse, but a mistyped flag gets the closest of its command's own flags and that command's usage
    (argparse before 3.14 names neither: it gives the top-level usage)."""

    def parse_args(self, args=None, namespace=None):
        words = sys.argv[1:] if args is None else list(args)
        if words and words[0] in RENAMED:
            self.error(f"`harness {words[0]}` is now `harness {RENAMED[words[0]]}`, with the same arguments "
                       f"(and `harness report --{words[0]} DIR` is `harness report --{RENAMED[words[0]]} DIR`).")
        known, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._subparsers._group_actions[0].choices.get(getattr(known, "subcommand", None), self) \
                if self._subparsers else self
            command.error(unrecognized(extras, command))
        return known


def unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's message for `extras`, with a suggestion for each that looks like a mistyped flag."""
    flags = [o for action in parser._actions for o in action.option_strings]
    close = {extra: difflib.get_close_matches(extra.split("=")[0], flags, n=1) for extra in extras
             if extra.startswith("-")}
    guesses = [(extra, match[0]) for extra, match in close.items() if match]
    said = f"unrecognized arguments: {' '.join(extras)}"
    if len(guesses) == 1:
        return f"{said}; did you mean {guesses[0][1]}?"
    return f"{said}; did you mean {', '.join(f'{flag} for {extra}' for extra, flag in guesses)}?" if guesses else said


def add_command(commands, name: str, help: str, **options) -> argparse.ArgumentParser:
    """A subcommand whose --help opens with a description: its own, else its one-line help."""
    options.setdefault("description", help[0].upper() + help[1:] + ".")
    return commands.add_parser(name, help=help, **options)


def add_history_commands(commands) -> None:
    def runs_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs are kept (default runs)")

    run_help = "a run directory, or a unique prefix of a run id under --runs-dir"
    p = add_command(commands, "runs", help="list runs, newest first")
    p.add_argument("--problem", default=None, help="only runs of this problem (its file name without .py)")
    runs_dir(p)
    p.set_defaults(handler=cmd_runs)
    p = add_command(commands, "show", help="a run's rounds with verdicts, times and speedups, or one round's file")
    p.add_argument("run", help=run_help)
    p.add_argument("--round", type=COUNT, default=None, metavar="N", help="the round whose file to print")
    p.add_argument("--best", action="store_true", help="the best round's file (its candidate unless another "
                                                        "is named)")
    files = p.add_mutually_exclusive_group()
    for name, help_text in (("source", "the candidate"), ("prompt", "the prompt"), ("answer", "the answer"),
                            ("log", "the build log")):
        files.add_argument(f"--{name}", action="store_true", help=f"print {help_text} of --round N or --best")
    runs_dir(p)
    p.set_defaults(handler=cmd_show)
    p = add_command(commands, "promote", help="copy a run's best candidate to kernels/<problem>.py")
    p.add_argument("run", help=run_help)
    p.add_argument("--kernels-dir", type=Path, default=Path("kernels"),
                   help="where promoted kernels go (default kernels)")
    p.add_argument("--force", action="store_true", help="overwrite even a kernel at least as fast")
    runs_dir(p)
    p.set_defaults(handler=cmd_promote)
    p = add_command(commands, "export", help="write a candidate's kernel as an installable package: a torch "
                    "custom op with a fake implementation, and a ModelNew")
    p.add_argument("run", help=run_help + ", or a candidate .py file")
    p.add_argument("--name", required=True, metavar="LIB::OP", help="the op's name, such as mykernels::layer_norm")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="DIR", help="where (default ./LIB_OP)")
    runs_dir(p)
    p.set_defaults(handler=cmd_export)
    p = add_command(commands, "replay", help="evaluate a run's best candidate, or a kernel file, again and compare "
                    "with the record")
    p.add_argument("run", help=run_help + ", or a candidate .py file (kernels/<problem>.py finds its problem)")
    p.add_argument("--problem", type=Path, default=None,
                   help="the problem file, where it moved since the run or for a loose candidate file")
    add_eval_options(p)
    runs_dir(p)
    p.set_defaults(handler=cmd_replay)
    p = add_command(commands, "plot", help="speedup per round of one or more runs of one problem, as a PNG")
    p.add_argument("runs", nargs="+", metavar="run", help=run_help)
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE.png",
                   help="where to write the plot: a file, or a directory to write <first run>.png into "
                        "(default plot.png in the first run's directory, beside report.html)")
    runs_dir(p)
    p.set_defaults(handler=cmd_plot)
    p = add_command(commands, "audit", help="judge verdicts again with every check at its strictest, in fresh "
                    "processes: agree or disagree per record (exit 1 if any disagrees)")
    p.add_argument("target", help="a result file (harness eval --json), a sweep's results folder, or a run "
                                  "(" + run_help + ")")
    p.add_argument("--top", type=COUNT, default=None, metavar="K",
                   help="only the K highest speedups (correct verdicts first)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="where the audit's JSON goes (default audit.json beside the target)")
    add_eval_options(p)
    runs_dir(p)
    p.set_defaults(handler=cmd_audit)
    p = add_command(commands, "breaks", help=BREAKS_HELP, description=BREAKS_DESCRIPTION)
    add_breaks_arguments(p)
    p.set_defaults(handler=breaks_main)
    p = add_command(commands, "compare", help="two runs side by side: rounds to target, best speedup, tokens, time")
    p.add_argument("run_a", help=run_help)
    p.add_argument("run_b", help=run_help)
    runs_dir(p)
    p.set_defaults(handler=cmd_compare)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="harness", description=PITCH,
                    epilog="`harness COMMAND --help` for a command's flags; docs/cli.md for the reference.")
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    p = add_command(commands, "eval", help="evaluate candidate(s) against a problem: one verdict each")
    p.add_argument("problem", help="problem file (KernelBench format)")
    p.add_argument("candidates", nargs="+", metavar="candidate", help="candidate file(s) defining ModelNew")
    p.add_argument("--json", type=Path, default=None, metavar="OUT",
                   help="write the full result as JSON (a list when there are several candidates)")
    add_eval_options(p)
    p.set_defaults(handler=cmd_eval)
    p = add_command(commands, "build", help=BUILD_HELP, description=BUILD_DESCRIPTION)
    add_build_arguments(p)
    p.set_defaults(handler=build_main)
    p = add_command(commands, "doctor", help="check GPUs, torch, compilers and the build cache; say how to fix "
                    "what is missing (exit 1 when something the device needs is missing)")
    p.add_argument("--device", type=device_choice, default=None, metavar="cuda|cuda:N|cpu",
                   help="what to check for (default: cuda when a GPU is present)")
    p.add_argument("--cache-dir", type=Path, default=None, help="build cache (default ~/.cache/harness)")
    p.add_argument("--prepare", action="store_true",
                   help="build torch's precompiled header now, with the flags the device's idiom passes "
                        "(about 45 s, once per torch install)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the findings as JSON")
    p.set_defaults(handler=cmd_doctor)
    p = add_command(commands, "profile", help="one forward of a candidate (or the reference) under Nsight Compute: "
                    "a row per kernel and plain-language findings (the torch profiler where ncu cannot run)")
    p.add_argument("problem", help="problem file (KernelBench format)")
    p.add_argument("candidate", nargs="?", default=None, help="candidate file defining ModelNew")
    p.add_argument("--reference", action="store_true", help="profile the problem's reference Model instead")
    p.add_argument("--kernel", default=None, metavar="REGEX", help="only kernels whose name matches REGEX")
    p.add_argument("--device", type=device_choice, default=None, metavar="cuda|cuda:N|cpu",
                   help="where to run it (default: cuda when a GPU is present)")
    p.add_argument("--time-limit", type=float, default=300.0, metavar="S", help="seconds before the profile is "
                   "killed (default 300)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the profile as JSON")
    p.set_defaults(handler=cmd_profile)

    p = add_command(commands, "run", help="the optimization loop: propose, evaluate, feed back, repeat",
                    description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(p)
    p.set_defaults(handler=run_main)
    p = add_command(commands, "sweep", description=SWEEP_DESCRIPTION,
                    help="every (problem, candidate) pair of a suite, once: correctness and fast_p per level")
    add_sweep_arguments(p)
    p.set_defaults(handler=sweep_main)
    add_history_commands(commands)
    p = add_command(commands, "report", help="a run, or a sweep (--sweep DIR), as one HTML page to open in a browser",
                    description=REPORT_DESCRIPTION)
    add_report_arguments(p)
    p.set_defaults(handler=report_main)
    p = add_command(commands, "mcp", description=MCP_DESCRIPTION,
                    help="serve the harness to a coding agent as MCP tools; its sessions are stored as runs")
    add_mcp_arguments(p)
    p.set_defaults(handler=mcp_main)
    return parser


class _Signalled:
    """SIGTERM and SIGHUP end the harness the way Ctrl-C does: through every cleanup on the way out."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum = 0
        self.previous = {s: signal.signal(s, self._raise) for s in self.SIGNALS}

    def _raise(self, signum: int, frame) -> None:
        self.signum = signum
        for s in self.SIGNALS:  # a second signal must not cut the cleanup short
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt

    def restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)


# The commands that start processes of their own; the others (listings, show, promote, ...) end nothing.
STARTS_PROCESSES = frozenset({"eval", "build", "doctor", "profile", "run", "sweep", "replay", "mcp", "audit"})


def _end_leftovers(args: argparse.Namespace, console: Console) -> None:
    """What a harness killed outright (SIGKILL) left running, ended before this one starts any."""
    from ..engine.options import default_cache_dir
    from ..engine.processes.ownership import REGISTRY, end_leftovers

    said = end_leftovers(Path(getattr(args, "cache_dir", None) or default_cache_dir()) / REGISTRY)
    if said:
        console.print(f"[yellow]{said}[/yellow]")


# Piped into a file, rich would wrap tables at 80 columns and stand a kernel table's cells on end.
PIPED_WIDTH = 160


def main(argv: list[str] | None = None) -> int:
    from ..engine.processes.ownership import end_all

    console, errors = Console(), Console(stderr=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPED_WIDTH)
    args = build_parser().parse_args(argv)
    if args.subcommand == "mcp":  # its stdout carries the protocol
        console = errors
    signalled = _Signalled()
    try:
        pin_gpu(args)
        if args.subcommand in STARTS_PROCESSES:
            _end_leftovers(args, console)
        code = args.handler(args, console)
    except HarnessError as exc:
        print_error(errors, exc)
        code = USAGE_ERROR
    except KeyboardInterrupt:
        console.print("[yellow]Interrupted.[/yellow]")
        code = 130
    finally:
        end_all()
        signalled.restore()
    return 128 + signalled.signum if signalled.signum else code
