"""`harness run`: its flags, and the wiring from settings to a finished run.

Exit status: 0 when the best candidate is acceptable (its interval at or above --accept),
however the run ended; 1 when the run ended without one (under --red-team: 0 when the judge
held, 1 when a round broke it); 2 for unusable input
(flags, config, problem, prompts, run directory, an endpoint that cannot serve
the run at its start); 3 when the endpoint (or --command's program) failed mid-run
before an acceptable candidate (--resume carries it on); 130 when interrupted.
"""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Optional

from rich.console import Console

from ..device import describe
from ..engine.pool import Pool
from ..errors import HarnessError
from ..loop.prompts import Prompts
from ..loop.proposers import kinds
from ..loop.start import (ceiling_note, drive, first_for, make_proposer, new_run, reopen, same_problem,
                          system_for, untimed_first)
from ..loop.suite import resume_suite, run_suite, start_suite
from ..problem import load_problem
from ..runs.history import resolve as resolve_run
from ..runs.settings import Evaluation
from ..runs.records import Outcome, Round, Run, Status
from ..runs.store import RunStore
from ..runs.suites import SuiteRecord, SuiteStore, is_suite
from .config import (COUNT, POSITIVE, SECONDS, ConfigError, Settings, accept_note, add_eval_options,
                     eval_options, evaluation_options, number, parse_gpus, proposer_reason, resolve, take_free_gpu)
from .display import Display, SuiteDisplay, print_error, resume_line, summary
from .history import print_suite

EXIT_OK, EXIT_SHORT, EXIT_USAGE, EXIT_PROPOSER, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_BROKEN = 1  # under --red-team: a round broke the judge
RED_TEAM_LINE = ("Red team: the model is asked to break the judge. Each candidate the fast verdict passes is audited "
                 "in processes of its own; one passed at the acceptable speedup or more that the audit disagrees with "
                 "is a break, kept under breaks/ in the run.")
DEFAULT_CONCURRENCY = 4  # problems whose loops run at once under --suite
SYSTEM_LABEL, USER_LABEL = "===== system prompt =====", "===== user prompt ====="  # a dry run's two prompts
DESCRIPTION = ("Optimize a problem: propose a ModelNew, evaluate it, feed the verdict back, "
               "until the target speedup or a budget is reached. Runs are stored under runs/.")
EPILOG = """examples:
  harness run problems/layernorm_4d.py --model gpt-5 --rounds 10
  harness run problems/layernorm_4d.py --base-url http://localhost:8000/v1 --model NAME   (a local server: no key)
  harness run problems/layernorm_4d.py --model NAME --dry-run                          (the first request only)
  harness run --resume runs/RUN_ID

exit status: 0 acceptable candidate found, 1 none found (--red-team: 0 the judge held, 1 a round broke
it), 2 unusable input, 3 the endpoint (or --command's program) failed mid-run with no acceptable
candidate (--resume carries it on), 130 interrupted"""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare every `harness run` flag; all default to None so a config file or a
    resumed run's settings fill what the command line leaves out."""
    parser.add_argument("problem", nargs="?", metavar="PROBLEM",
                        help="problem file in KernelBench format (not with --resume or --suite)")
    parser.add_argument("--suite", metavar="DIR",
                        help="one run per problem file in DIR or its level*/ directories, several at once")
    parser.add_argument("--concurrency", type=COUNT, metavar="N",
                        help=f"with --suite: problems run at once, so model requests in flight "
                             f"(times --samples; default {DEFAULT_CONCURRENCY})")
    parser.add_argument("--resume", metavar="RUN_DIR",
                        help="carry on a stopped or killed run, or suite (its suite-... directory)")
    _model_arguments(parser.add_argument_group("model: where candidates come from and how the endpoint is asked"))
    _loop_arguments(parser.add_argument_group("loop: when a run stops and what each round keeps"))
    evaluation = parser.add_argument_group("evaluation: as `harness eval`, and profiling")
    evaluation.add_argument("--profile", action="store_true", default=None,
                            help="profile each correct candidate's forward (ncu, else the torch profiler) and feed "
                                 "back its heaviest kernels and the findings")
    evaluation.add_argument("--profile-kernel", dest="profile_kernel", metavar="REGEX",
                            help="with --profile: only kernels whose name matches (ncu's --kernel-name)")
    add_eval_options(evaluation)  # --device, --trials, timeouts, --cache-dir: as `harness eval`
    output = parser.add_argument_group("output")
    output.add_argument("--runs-dir", metavar="DIR", dest="runs_dir", help="where runs are stored (default runs/)")
    output.add_argument("--dry-run", dest="dry_run", action="store_true",
                        help="print the first request (system prompt, first user prompt) and exit: no endpoint, "
                             "no run directory, and the reference is not timed")
    output.add_argument("--measure", action="store_true",
                        help="with --dry-run: time the reference (seconds) and put its time in the prompt, "
                             "as a run does")


def _model_arguments(model: argparse._ArgumentGroup) -> None:
    model.add_argument("--proposer", choices=kinds.names(),
                       help="where candidates come from (default: openai when an endpoint or model is "
                            "configured, files with --files, command with --command; human, a person at an "
                            "editor, only when asked)")
    model.add_argument("--model", metavar="NAME", help="model name at the endpoint")
    model.add_argument("--base-url", metavar="URL", dest="base_url",
                       help="OpenAI-compatible endpoint, such as http://localhost:8000/v1 (default: "
                            "$OPENAI_BASE_URL, else OpenAI); a key, where the server wants one, comes from "
                            "$OPENAI_API_KEY")
    model.add_argument("--config", metavar="FILE.toml", help="TOML file with [endpoint], [limits] and [run] tables")
    model.add_argument("--prompts", metavar="DIR", help="directory of prompt templates overriding prompts/")
    model.add_argument("--files", nargs="+", metavar="F",
                       help="candidate .py files or recorded answers (.txt/.md), or a "
                            "directory of them, one per round")
    model.add_argument("--command", metavar="\"PROGRAM ARGS\"",
                       help="a program that answers each prompt, run without a shell: the prompt on its stdin, "
                            "the answer (as a model's) on its stdout, within --request-timeout (config: "
                            "`command` in [run])")
    model.add_argument("--max-tokens", metavar="N", dest="max_tokens", type=COUNT, help="most tokens per answer")
    model.add_argument("--token-param", dest="token_param", choices=["max_tokens", "max_completion_tokens"],
                       help="the name --max-tokens is sent as (default max_tokens; reasoning models on "
                            "OpenAI's API need max_completion_tokens, taken by itself on a refusal)")
    model.add_argument("--reasoning-effort", metavar="E", dest="reasoning_effort", help="sent as reasoning_effort")
    model.add_argument("--temperature", metavar="T", type=number(float, 0),
                       help="sampling temperature sent with each request (default: the endpoint's)")
    model.add_argument("--request-timeout", dest="request_timeout", type=SECONDS, metavar="S",
                       help="seconds one request may take, per attempt (default 600)")
    model.add_argument("--max-retries", dest="max_retries", type=number(int, 0), metavar="N",
                       help="retries of a failed or timed-out request, with backoff (default 2)")
    model.add_argument("--retry-for", dest="retry_for", type=number(float, 0, duration=True), metavar="T",
                       help="how long a server answering 429 or 5xx after the retries is waited out, in "
                            "doubling waits from 30 s: seconds, or 10m (default 5m; 0: not at all)")
    model.add_argument("--stream", action="store_true", default=None,
                       help="ask for answers as server-sent events (config: stream = true)")


def _loop_arguments(loop: argparse._ArgumentGroup) -> None:
    loop.add_argument("--rounds", metavar="N", type=COUNT,
                      help="round budget (default 10; none for the human proposer)")
    loop.add_argument("--accept", metavar="X", type=POSITIVE, help="acceptable speedup (default 1.5)")
    loop.add_argument("--target", metavar="X", type=POSITIVE, help="speedup that ends the run (default 2.0)")
    loop.add_argument("--samples", metavar="K", type=COUNT, help="answers asked for per round, each told a different "
                                                    "direction and built as it arrives (default 1)")
    loop.add_argument("--beam", type=number(int, 0), metavar="N",
                      help="keep the N best correct candidates; each sample starts from one of them, drawn "
                           "by speedup (default 0: one chain from the best)")
    loop.add_argument("--wall-time", metavar="T", dest="wall_time", type=SECONDS,
                      help="time budget, also while waiting on the model: seconds, or 30m, 2h")
    loop.add_argument("--token-budget", metavar="N", dest="token_budget", type=COUNT,
                      help="total tokens over the run")
    loop.add_argument("--budget-usd", metavar="D", dest="budget_usd", type=POSITIVE,
                      help="dollars over the run, at the config's [endpoint] prices")
    loop.add_argument("--window", metavar="N", type=number(int, 0),
                      help="past rounds kept in the conversation; 0 keeps all (default 4)")
    loop.add_argument("--restart-after", metavar="N", dest="restart_after", type=int,
                      help="rounds without a measurable gain before the conversation restarts from the "
                           "best with a different approach; 0 never (default 3)")
    loop.add_argument("--plateau", metavar="N", type=int,
                      help="rounds without a measurable gain that end the run; 0 never (default 6)")
    loop.add_argument("--red-team", dest="red_team", action="store_true", default=None,
                      help="ask the model to break the judge: each candidate the fast verdict passes is audited, and "
                           "one it passes at --accept or more that the audit does not is a break, kept in the run "
                           "(exit 1 where a round broke it); only a budget ends the run")


def _absolute(settings: Settings) -> None:
    """Paths as absolute ones, so a resumed run finds them from any directory."""
    if settings.problem:  # a suite's settings name no problem of their own
        settings.problem = str(Path(settings.problem).resolve())
    settings.files = [str(Path(f).resolve()) for f in settings.files]
    if settings.prompts:
        settings.prompts = str(Path(settings.prompts).resolve())
    if settings.config:
        settings.config = str(Path(settings.config).resolve())


def _open(args: argparse.Namespace, flags: dict, held: ExitStack) -> tuple[RunStore, Run, list[Round]]:
    """The run to carry on or start, locked for this process until `held` closes."""
    if args.concurrency:
        raise ConfigError("--concurrency goes with --suite DIR: one run has one loop.")
    if args.resume:
        if args.problem:
            raise ConfigError("Give either PROBLEM or --resume RUN_DIR, not both: a resumed run "
                              "keeps its problem.")
        store, run, rounds = reopen(resolve_run(args.resume, Path(args.runs_dir or "runs")))
        held.callback(store.release)
        run.settings = resolve(flags, base=run.settings)
        kinds.get(run.settings.proposer).probe(run.settings)
        return store, run, rounds
    if not args.problem:
        raise ConfigError("Give a problem file (harness run PROBLEM) or --resume RUN_DIR.")
    settings = resolve({**flags, "problem": args.problem})
    _absolute(settings)
    problem = load_problem(settings.problem)
    # Refuse unusable input before a run directory is made for it.
    Prompts(settings.prompts)
    kinds.get(settings.proposer).ready(settings)
    store, run = new_run(settings, evaluation_options(args)[0], problem)
    held.callback(store.release)
    return store, run, []


def _resumed(args: argparse.Namespace, flags: dict, recorded: Evaluation, device: str) -> tuple[Evaluation, str]:
    """A resumed run's (or suite's) evaluation options, flags over its record, and a line saying
    which it took from the record and which a flag overrode."""
    evaluation, kept, overridden = evaluation_options(args, recorded)
    (overridden if flags.get("device") else kept).append("device")
    values = {**vars(evaluation), "device": device}

    def listed(names: list[str]) -> str:
        return ", ".join(f"{name} {values[name]}" for name in names) or "none"

    return evaluation, (f"Evaluation options from the run's record: {listed(kept)}; "
                        f"overridden by flags: {listed(overridden)}.")


def _dry_run(args: argparse.Namespace, flags: dict, console: Console) -> None:
    """The first request as a run would send it, each prompt labelled; nothing is asked, built or
    stored, and the reference is timed only with --measure."""
    if args.resume or not args.problem:
        raise ConfigError("--dry-run takes a problem file (harness run PROBLEM --dry-run), not --resume.")
    settings = resolve({**flags, "problem": args.problem}, dry_run=True)
    problem = load_problem(settings.problem)
    prompts = Prompts(settings.prompts)
    args.device = settings.device
    gpus = parse_gpus(args.gpus)
    options = take_free_gpu(eval_options(args), gpus,  # a line on stderr: stdout is the prompts alone
                            partial(Console(stderr=True).print, markup=False, highlight=False, soft_wrap=True))
    room = None
    with Pool(problem.path, options, gpus, args.jobs) as pool:
        if args.measure:
            text, _, room = first_for(pool, prompts, problem, settings, options.trials)
        else:
            text = untimed_first(pool, prompts, problem, settings, options.trials)
    system = system_for(prompts, settings)
    console.print(f"{SYSTEM_LABEL}\n{system}\n\n{USER_LABEL}\n{text}", markup=False, highlight=False,
                  soft_wrap=True, end="")
    errors = Console(stderr=True)
    errors.print(_would_send(settings, measured=args.measure), markup=False, highlight=False, soft_wrap=True)
    if room and (note := ceiling_note(room, settings.target)):
        errors.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)


def _would_send(settings: Settings, measured: bool) -> str:
    """What a run would do with the prompts a dry run prints."""
    said = ("Dry run: nothing was sent, built or stored. " if measured else
            "Dry run: nothing was sent, built, stored or timed (--measure times the reference for the prompt). ")
    return said + kinds.dry_run(settings)


def run_main(args: argparse.Namespace, console: Optional[Console] = None) -> int:
    with ExitStack() as held:  # the run's lock, released however the run ends
        return _run(args, console or Console(), held)


def _run(args: argparse.Namespace, console: Console, held: ExitStack) -> int:
    errors = Console(stderr=True)
    flags = {k: v for k, v in vars(args).items() if k not in ("problem", "resume", "suite", "concurrency")}
    if args.suite or (args.resume and is_suite(Path(args.resume))):
        return _run_suite(args, flags, console, errors, held)
    clock_start = time.monotonic()
    try:
        if args.dry_run:
            _dry_run(args, flags, console)
            return EXIT_OK
        if args.measure:
            raise ConfigError("--measure goes with --dry-run: a run always times the reference.")
        store, run, rounds = _open(args, flags, held)
        settings = run.settings
        problem = load_problem(settings.problem)
        same_problem(problem, run)
        prompts = Prompts(settings.prompts)
        device = describe(settings.device)
        if args.resume:
            run.evaluation, resumed = _resumed(args, flags, run.evaluation, settings.device)
        args.device = settings.device
        options = eval_options(args, run.evaluation)
        proposer = make_proposer(settings, store, rounds, prompts, problem)
    except HarnessError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    reason = "as the run was started" if args.resume else proposer_reason(flags, settings)
    console.print(f"Run {run.id}: {problem.name} on {device.name}, proposer {settings.proposer}"
                  + (f" ({settings.model})" if settings.model else "") + f", {reason}"
                  + f"; stored in {store.path}", markup=False, highlight=False, soft_wrap=True)
    if args.resume:
        console.print(resumed, markup=False, highlight=False, soft_wrap=True)
    if settings.red_team:
        console.print(RED_TEAM_LINE, markup=False, highlight=False, soft_wrap=True)
    if note := accept_note(settings):
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    options = take_free_gpu(options, run.evaluation.gpus,
                            partial(console.print, markup=False, highlight=False, soft_wrap=True))
    seconds_before = run.seconds

    def elapsed() -> float:
        return seconds_before + time.monotonic() - clock_start

    try:
        with Pool(problem.path, options, run.evaluation.gpus, args.jobs) as pool, \
                Display(console, run, elapsed) as display:
            drive(run=run, store=store, rounds=rounds, proposer=proposer, pool=pool, prompts=prompts,
                  problem=problem, trials=options.trials, observer=display, elapsed=elapsed)
    except HarnessError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    except KeyboardInterrupt:  # while the evaluator was starting; the loop handles its own
        return EXIT_INTERRUPTED
    finally:
        proposer.close()
    failed = run.status is Status.FAILED  # the proposer's failure: its paragraph goes to stderr alone
    summary(console, run, rounds, str(store.path), message="" if failed else None)
    acceptable = run.outcome in (Outcome.TARGET, Outcome.ACCEPTED)
    if failed or run.status is Status.INTERRUPTED:
        print_error(errors, f"{run.message} {resume_line(run, rounds, store.path)}" if failed
                    else resume_line(run, rounds, store.path), prefix=failed)
    if run.status is Status.INTERRUPTED:
        return EXIT_INTERRUPTED
    if settings.red_team:  # as `harness audit`: a disagreement found is 1
        return EXIT_PROPOSER if failed else (EXIT_BROKEN if any(rnd.broke for rnd in rounds) else EXIT_OK)
    if failed and not acceptable:
        return EXIT_PROPOSER
    return EXIT_OK if acceptable else EXIT_SHORT


def _open_suite(args: argparse.Namespace, flags: dict, held: ExitStack) -> tuple[SuiteStore, SuiteRecord, str]:
    """The suite to carry on or start, locked until `held` closes, and for a resumed one the line
    on its evaluation options."""
    if args.problem or args.dry_run or args.measure:
        raise ConfigError("--suite DIR takes no PROBLEM, no --dry-run and no --measure: it runs every problem file "
                          "in DIR (try --dry-run on one of them).")
    if args.resume:
        if args.suite:
            raise ConfigError("Give either --suite DIR or --resume SUITE_DIR, not both: a resumed suite "
                              "keeps its problems.")
        store, record = resume_suite(args.resume)
        held.callback(store.release)
        record.settings = resolve(flags, base=record.settings)
        record.evaluation, resumed = _resumed(args, flags, record.evaluation, record.settings.device)
        record.concurrency = args.concurrency or record.concurrency
        kinds.get(record.settings.proposer).probe(record.settings)
        return store, record, resumed
    settings = resolve({**flags, "problem": ""})
    _absolute(settings)
    kinds.get(settings.proposer).probe(settings)
    store, record = start_suite(args.suite, settings, evaluation_options(args)[0],
                                args.concurrency or DEFAULT_CONCURRENCY)
    held.callback(store.release)
    return store, record, ""


def _run_suite(args: argparse.Namespace, flags: dict, console: Console, errors: Console, held: ExitStack) -> int:
    clock_start = time.monotonic()
    try:
        store, record, resumed = _open_suite(args, flags, held)
        args.device = record.settings.device
        options = eval_options(args, record.evaluation)
    except HarnessError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    s = record.settings
    console.print(f"Suite {record.id}: {len(record.problems)} problem(s) in {record.directory} on "
                  f"{describe(s.device).name}, proposer {s.proposer}" + (f" ({s.model})" if s.model else "")
                  + f" ({'as the suite was started' if args.resume else proposer_reason(flags, s)})"
                  + f", {record.concurrency} at once, stored in {store.path}",
                  markup=False, highlight=False, soft_wrap=True)
    if resumed:
        console.print(resumed, markup=False, highlight=False, soft_wrap=True)
    if note := accept_note(s):
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    options = take_free_gpu(options, record.evaluation.gpus,
                            partial(console.print, markup=False, highlight=False, soft_wrap=True))
    seconds_before = record.seconds
    with SuiteDisplay(console, record, lambda: seconds_before + time.monotonic() - clock_start) as display:
        run_suite(store, record, options, display, build_jobs=args.jobs,
                  settle=lambda settings: resolve(flags, base=settings))
    print_suite(console, store, record)
    if record.status is Status.INTERRUPTED:
        return EXIT_INTERRUPTED
    acceptable = all(p.outcome in (Outcome.TARGET, Outcome.ACCEPTED) for p in record.problems)
    return EXIT_OK if acceptable else EXIT_SHORT


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="harness run", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    return run_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
