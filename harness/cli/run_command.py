"""`harness run`: its flags, and the wiring from settings to a finished run.

Exit status: 0 when the best candidate is acceptable (at or above --accept),
1 when the run ended without one, 2 for unusable input (flags, config, problem,
prompts, run directory, endpoint), 130 when interrupted.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from rich.console import Console

from ..device import describe
from ..engine.pool import Pool
from ..errors import HarnessError
from ..integrity.roofline import Headroom, headroom
from ..loop.loop import CEILING_SHARE, Loop, restore
from ..loop.prompts import Prompts, candidate_template, first_prompt, system_prompt
from ..loop.proposers.base import Proposer
from ..loop.proposers.files import FilesProposer, expand
from ..loop.proposers.human import HumanProposer
from ..problem import ProblemError, load_problem
from ..runs.store import Outcome, ProblemRef, Round, Run, RunStore, Status, utc_now
from .config import (COUNT, POSITIVE, PROPOSERS, SECONDS, ConfigError, Settings, add_eval_options,
                     eval_options, evaluation_options, number, parse_gpus, resolve)
from .display import Display, summary

HUMAN_FILE = "candidate.py"  # in the run directory: the file a person edits
EXIT_OK, EXIT_SHORT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DESCRIPTION = ("Optimize a problem: propose a ModelNew, evaluate it, feed the verdict back, "
               "until the target speedup or a budget is reached. Runs are stored under runs/.")
EPILOG = ("exit status: 0 acceptable candidate found, 1 none found, 2 unusable input, "
          "130 interrupted")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare every `harness run` flag; all default to None so a config file or a
    resumed run's settings fill what the command line leaves out."""
    parser.add_argument("problem", nargs="?", metavar="PROBLEM",
                        help="problem file in KernelBench format (not with --resume)")
    parser.add_argument("--proposer", choices=PROPOSERS,
                        help="where candidates come from (default: openai when an endpoint is "
                             "configured, files with --files, else human)")
    parser.add_argument("--model", help="model name at the endpoint")
    parser.add_argument("--base-url", dest="base_url",
                        help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL or OpenAI); "
                             "the key comes from $OPENAI_API_KEY")
    parser.add_argument("--rounds", type=COUNT,
                        help="round budget (default 10; none for the human proposer)")
    parser.add_argument("--accept", type=POSITIVE, help="acceptable speedup (default 1.5)")
    parser.add_argument("--target", type=POSITIVE, help="speedup that ends the run (default 2.0)")
    parser.add_argument("--samples", type=COUNT, help="answers asked for per round, each told a different "
                                                      "direction and built as it arrives (default 1)")
    parser.add_argument("--beam", type=number(int, 0), metavar="N",
                        help="keep the N best correct candidates; each sample starts from one of them, drawn "
                             "by speedup (default 0: one chain from the best)")
    parser.add_argument("--config", help="TOML file with [endpoint], [limits] and [run] tables")
    parser.add_argument("--prompts", help="directory of prompt templates overriding prompts/")
    parser.add_argument("--files", nargs="+", metavar="F",
                        help="candidate .py files or recorded answers (.txt/.md), or a "
                             "directory of them, one per round")
    parser.add_argument("--resume", metavar="RUN_DIR", help="carry on a stopped or killed run")
    parser.add_argument("--max-tokens", dest="max_tokens", type=COUNT, help="per answer")
    parser.add_argument("--token-param", dest="token_param", choices=["max_tokens", "max_completion_tokens"],
                        help="the name --max-tokens is sent as (default max_tokens; reasoning models on "
                             "OpenAI's API need max_completion_tokens, taken by itself on a refusal)")
    parser.add_argument("--reasoning-effort", dest="reasoning_effort", help="sent as reasoning_effort")
    parser.add_argument("--temperature", type=number(float, 0))
    parser.add_argument("--request-timeout", dest="request_timeout", type=SECONDS, metavar="S",
                        help="seconds one request may take, per attempt (default 600)")
    parser.add_argument("--max-retries", dest="max_retries", type=number(int, 0), metavar="N",
                        help="retries of a failed or timed-out request, with backoff (default 2)")
    parser.add_argument("--stream", action="store_true", default=None,
                        help="ask for answers as server-sent events (config: stream = true)")
    parser.add_argument("--wall-time", dest="wall_time", type=SECONDS,
                        help="time budget, also while waiting on the model: seconds, or 30m, 2h")
    parser.add_argument("--token-budget", dest="token_budget", type=COUNT,
                        help="total tokens over the run")
    parser.add_argument("--budget-usd", dest="budget_usd", type=POSITIVE,
                        help="dollars over the run, at the config's [endpoint] prices")
    parser.add_argument("--window", type=number(int, 0),
                        help="past rounds kept in the conversation; 0 keeps all (default 4)")
    parser.add_argument("--restart-after", dest="restart_after", type=int,
                        help="rounds without a measurable gain before the conversation restarts from the "
                             "best with a different approach; 0 never (default 3)")
    parser.add_argument("--plateau", type=int,
                        help="rounds without a measurable gain that end the run; 0 never (default 6)")
    parser.add_argument("--runs-dir", dest="runs_dir", help="where runs are stored (default runs/)")
    parser.add_argument("--profile", action="store_true", default=None,
                        help="profile each correct candidate's forward (ncu, else the torch profiler) and feed "
                             "back its heaviest kernels and the findings")
    parser.add_argument("--profile-kernel", dest="profile_kernel", metavar="REGEX",
                        help="with --profile: only kernels whose name matches (ncu's --kernel-name)")
    parser.add_argument("--dry-run", dest="dry_run", action="store_true",
                        help="print the first prompt and exit: no endpoint, no run directory")
    # --device, --trials, timeouts, --cache-dir: the same flags as `harness eval`.
    add_eval_options(parser)


def _absolute(settings: Settings) -> None:
    """Paths as absolute ones, so a resumed run finds them from any directory."""
    settings.problem = str(Path(settings.problem).resolve())
    settings.files = [str(Path(f).resolve()) for f in settings.files]
    if settings.prompts:
        settings.prompts = str(Path(settings.prompts).resolve())
    if settings.config:
        settings.config = str(Path(settings.config).resolve())


def _proposer(settings: Settings, store: RunStore, rounds: list[Round], prompts: Prompts,
              problem) -> Proposer:
    if settings.proposer == "files":
        return FilesProposer(settings.files, start=sum(len(r.samples) for r in rounds))
    if settings.proposer == "human":
        template = candidate_template(prompts, problem, accept=settings.accept, target=settings.target)
        return HumanProposer(store.path / HUMAN_FILE, template,
                             last=rounds[-1].candidate if rounds else None)
    from ..loop.proposers.openai import OpenAIProposer  # the client is slow to import; only here

    return OpenAIProposer(model=settings.model or "", api_key=os.environ.get(settings.api_key_env),
                          base_url=settings.base_url, temperature=settings.temperature,
                          max_tokens=settings.max_tokens, window=settings.window,
                          timeout=settings.request_timeout, max_retries=settings.max_retries,
                          api_key_env=settings.api_key_env, token_param=settings.token_param,
                          reasoning_effort=settings.reasoning_effort, extra_body=settings.extra_body,
                          stream=settings.stream)


def _open(args: argparse.Namespace, flags: dict, held: ExitStack) -> tuple[RunStore, Run, list[Round]]:
    """The run to carry on or start, locked for this process until `held` closes."""
    if args.resume:
        if args.problem:
            raise ConfigError("Give either PROBLEM or --resume RUN_DIR, not both: a resumed run "
                              "keeps its problem.")
        store = RunStore.open(args.resume)
        store.lock()  # before anything is read or set aside: another process may be writing it
        held.callback(store.release)
        run = store.load_run()
        run.settings = resolve(flags, base=run.settings)
        rounds = store.load_rounds()
        partial = store.partial_round(len(rounds) + 1)
        if partial:
            aside = store.set_aside(len(rounds) + 1)
            store.event("set_aside", round=len(rounds) + 1, path=str(aside.relative_to(store.path)))
        restore(run, store, rounds)
        store.event("resume", rounds_done=len(rounds))
        return store, run, rounds
    if not args.problem:
        raise ConfigError("Give a problem file (harness run PROBLEM) or --resume RUN_DIR.")
    settings = resolve({**flags, "problem": args.problem})
    _absolute(settings)
    problem = load_problem(settings.problem)
    # Refuse unusable input before a run directory is made for it.
    Prompts(settings.prompts)
    if settings.proposer == "files":
        expand(settings.files)
    store = RunStore.create(settings.runs_dir, problem.name)
    store.lock()
    held.callback(store.release)
    run = Run(id=store.id, settings=settings, created=utc_now(),
              problem=ProblemRef(problem.path, problem.name, problem.sha256),
              evaluation=evaluation_options(args)[0])
    store.save_run(run)
    store.event("start", problem=problem.name, proposer=settings.proposer)
    return store, run, []


def _resumed_options(run: Run, kept: list[str], overridden: list[str]) -> str:
    """Which evaluation options a resumed run took from its record, and which a flag overrode."""
    values = {**vars(run.evaluation), "device": run.settings.device}

    def listed(names: list[str]) -> str:
        return ", ".join(f"{name} {values[name]}" for name in names) or "none"

    return f"Evaluation options from the run's record: {listed(kept)}; overridden by flags: {listed(overridden)}."


def _first(pool: Pool, prompts: Prompts, problem, settings: Settings, trials: int
           ) -> tuple[str, list[str], Headroom]:
    """The first prompt, with the facts the reference process finds (hardware, inputs, peaks,
    the reference's own time); the problem's warnings, which every result carries and no
    candidate can act on; and the headroom the reference leaves."""
    facts, environment = pool.facts()
    reference = pool.reference_time()
    room = headroom(reference.median, reference.overhead, facts.roofline, facts.peaks)
    return first_prompt(prompts, problem, describe(settings.device), accept=settings.accept,
                        target=settings.target, trials=trials, facts=facts, environment=environment,
                        headroom=room), facts.warnings, room


def ceiling_note(room: Headroom, target: float) -> str:
    """A warning when the target is beyond what the hardware allows; empty otherwise."""
    if room.ceiling is None or target <= room.ceiling:
        return ""
    return (f"The target {target:g}x is above the physical ceiling of about {room.ceiling:.2f}x: the reference "
            f"takes {room.reference_ms:.4g} ms, and a kernel at least its floor of {room.roofline.floor_ms:.4g} ms "
            f"(the problem's bytes at the measured peak) plus {room.host_ms:.2g} ms of host time for a call. "
            f"The run stops with reason `ceiling` once the best is within {1 - CEILING_SHARE:.0%} of it.")


def _dry_run(args: argparse.Namespace, flags: dict, console: Console) -> None:
    """The first prompt as a run would send it; nothing is asked, built or stored."""
    if args.resume or not args.problem:
        raise ConfigError("--dry-run takes a problem file (harness run PROBLEM --dry-run), not --resume.")
    settings = resolve({**flags, "problem": args.problem})
    problem = load_problem(settings.problem)
    prompts = Prompts(settings.prompts)
    args.device = settings.device
    options = eval_options(args)
    with Pool(problem.path, options, parse_gpus(args.gpus), args.jobs) as pool:
        text, _, room = _first(pool, prompts, problem, settings, options.trials)
    console.print(text, markup=False, highlight=False, soft_wrap=True, end="")
    if note := ceiling_note(room, settings.target):
        Console(stderr=True).print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)


def run_main(args: argparse.Namespace, console: Optional[Console] = None) -> int:
    with ExitStack() as held:  # the run's lock, released however the run ends
        return _run(args, console or Console(), held)


def _run(args: argparse.Namespace, console: Console, held: ExitStack) -> int:
    errors = Console(stderr=True)
    flags = {k: v for k, v in vars(args).items() if k not in ("problem", "resume")}
    clock_start = time.monotonic()
    try:
        if args.dry_run:
            _dry_run(args, flags, console)
            return EXIT_OK
        store, run, rounds = _open(args, flags, held)
        settings = run.settings
        problem = load_problem(settings.problem)
        if problem.sha256 != run.problem.sha256:
            raise ProblemError(f"Problem file {problem.path} changed since run {run.id} started "
                               "(its hash differs), so the recorded rounds no longer apply to it. "
                               "Start a new run.")
        prompts = Prompts(settings.prompts)
        device = describe(settings.device)
        system = system_prompt(prompts)
        if args.resume:
            run.evaluation, kept, overridden = evaluation_options(args, run.evaluation)
            resumed = _resumed_options(run, kept + ([] if flags.get("device") else ["device"]),
                                       overridden + (["device"] if flags.get("device") else []))
        args.device = settings.device
        options = eval_options(args, run.evaluation)
        proposer = _proposer(settings, store, rounds, prompts, problem)
    except HarnessError as exc:
        errors.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    console.print(f"Run {run.id}: {problem.name} on {device.name}, proposer {settings.proposer}"
                  + (f" ({settings.model})" if settings.model else "")
                  + f", stored in {store.path}", markup=False, highlight=False, soft_wrap=True)
    if args.resume:
        console.print(resumed, markup=False, highlight=False, soft_wrap=True)
    seconds_before = run.seconds

    def elapsed() -> float:
        return seconds_before + time.monotonic() - clock_start

    try:
        with Pool(problem.path, options, run.evaluation.gpus, args.jobs) as evaluator:
            first, problem_warnings, room = _first(evaluator, prompts, problem, settings, options.trials)
            run.ceiling = room.ceiling
            note = ceiling_note(room, settings.target)
            if note:
                console.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)
                if note not in run.notes:  # a resumed run measures again
                    run.notes.append(note)
                store.event("ceiling", ceiling=room.ceiling, target=settings.target)
            with Display(console, run, elapsed) as display:
                # a resumed run goes on with the first prompt it was given
                Loop(run=run, store=store, rounds=rounds, proposer=proposer, evaluator=evaluator,
                     prompts=prompts, system=system, first=rounds[0].prompt if rounds else first,
                     observer=display, elapsed=elapsed, hidden_warnings=problem_warnings).execute()
    except HarnessError as exc:
        errors.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:  # while the evaluator was starting; the loop handles its own
        return EXIT_INTERRUPTED
    finally:
        proposer.close()
    summary(console, run, rounds, str(store.path))
    if run.status is Status.INTERRUPTED:
        return EXIT_INTERRUPTED
    if run.status is Status.FAILED:
        return EXIT_USAGE
    return EXIT_OK if run.outcome in (Outcome.TARGET, Outcome.ACCEPTED) else EXIT_SHORT


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="harness run", description=DESCRIPTION, epilog=EPILOG)
    add_run_arguments(parser)
    return run_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
