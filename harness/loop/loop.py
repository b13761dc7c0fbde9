"""The optimization loop: propose, extract, evaluate, feed back, until a stop rule holds.

Stop rules, checked before each round: the target reached, the physical
ceiling (the best within 5% of it), the round budget, the wall-time budget (also
while waiting for an answer), the token budget, a plateau (rounds without a
measurable gain). The run's result is its best correct candidate, and its code is
pinned in every request whose window no longer holds it; under --beam a sample's
parent, drawn from the best few, is pinned instead. A round's samples are asked
at once, each told its own direction, and each is built as soon as it arrives.
After `restart_after` rounds without a measurable gain the conversation starts
again from the best. A candidate identical to an earlier one gets that
one's verdict again, unbuilt. Everything a round produces is stored as it
happens, so a killed run can resume from its last finished round.
"""
from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Iterable, Iterator, Optional, Protocol

from ..results import EvalResult, Verdict, assured, clears, speedup_text
from ..runs.records import Best, Outcome, Parent, Round, RoundSummary, Run, Sample, Status, StopReason
from ..runs.settings import cost_usd
from ..runs.store import CANDIDATE_FILE, RunStore, utc_now
from ..tokens import Tokens
from . import search
from .extract import approach, extract, strip_reasoning
from .feedback import (APPROACH_CHARS, Past, Thresholds, direction_line, feedback_text, parent_note, pinned_note,
                       sample_line, stalled)
from .observer import Observer
from .profile_text import fallback_note
from .prompts import Prompts
from .proposers import kinds
from .proposers.base import Conversation, Exhausted, OutOfTime, Proposer, ProposerError, Turn


# The run stops once the best is this close to the physical ceiling: no more can be measured.
CEILING_SHARE = 0.95


class Evaluates(Protocol):
    """Candidates in, their results out in order (harness.engine.pool.Pool); each candidate is
    built as soon as the iterable yields it."""

    def evaluate(self, candidates: Iterable[str], on_event: Optional[Callable[[int, str], None]] = None
                 ) -> list[EvalResult]: ...


def pick(samples: list[Sample]) -> int:
    """The sample a round carries on from: the fastest correct one, else the first with code."""
    correct = [i for i, s in enumerate(samples) if s.eval.ok and s.eval.speedup is not None]
    if correct:
        return max(correct, key=lambda i: samples[i].eval.speedup)
    with_code = [i for i, s in enumerate(samples) if s.candidate is not None]
    return with_code[0] if with_code else 0


def outcome(best: Optional[Best], thresholds: Thresholds) -> Outcome:
    """What the run's best clears (results.clears: its interval, where it has one)."""
    if best is None:
        return Outcome.NO_CORRECT
    if clears(best.speedup, best.interval, thresholds.target) and not best.degenerate:
        return Outcome.TARGET
    return Outcome.ACCEPTED if clears(best.speedup, best.interval, thresholds.accept) else Outcome.BELOW_ACCEPT


def stopped(run: Run, rounds: list[Round]) -> str:
    """Why the run stopped, as the start of its closing sentence: "Stopped after 3 round(s), the round limit"."""
    reasons = {
        StopReason.TARGET: "", StopReason.ROUNDS: f"after {len(rounds)} round(s), the round limit",
        StopReason.WALL_TIME: "at the wall-time budget", StopReason.TOKENS: "at the token budget",
        StopReason.FILES_EXHAUSTED: "when the files ran out", StopReason.INTERRUPTED: "when interrupted",
        StopReason.ERROR: "on an error",
        StopReason.PROPOSER: "when the endpoint failed" if kinds.get(run.settings.proposer).asks_model
                             else "when the proposer failed",
        StopReason.PLATEAU: f"after {run.settings.plateau} round(s) without a measurable gain",
        StopReason.BUDGET: "at the --budget-usd budget",
        StopReason.SESSION: "when the agent's session ended",
        StopReason.CEILING: f"at the physical ceiling (about {run.ceiling or 0:.2f}x: the reference's time over "
                            "its floor plus host time)",
    }
    return f"Stopped {reasons.get(run.stop_reason, run.stop_reason)}"


def conclusion(run: Run, rounds: list[Round], thresholds: Thresholds) -> str:
    """One sentence a person reads at the end of the run."""
    best = run.best
    reached = outcome(best, thresholds)
    shown = speedup_text(best.speedup, best.interval) if best else ""
    if reached is Outcome.TARGET:
        return f"Target {thresholds.target}x reached in round {best.round}: {shown}."
    stop = stopped(run, rounds)
    if best:
        verdict = "acceptable" if reached is Outcome.ACCEPTED else f"below the acceptable {thresholds.accept}x"
        # a reading at a bar whose interval reaches below it is said as such, not called clear of it
        bar = next((b for b in (thresholds.target, thresholds.accept) if best.speedup >= b
                    and not clears(best.speedup, best.interval, b)), None)
        unsure = f" (its 95% interval reaches below {bar}x)" if bar else ""
        if best.degenerate:  # the target is out of reach: no speedup on the problem measures anything
            return (f"{stop}: best {shown} in round {best.round}, which measures nothing: the problem is "
                    "degenerate, so no speedup on it counts.")
        return (f"{stop}: best {shown} in round {best.round} is {verdict}, "
                f"short of the {thresholds.target}x target{unsure}.")
    counts: dict[str, int] = {}
    for rnd in rounds:
        counts[rnd.eval.verdict.value] = counts.get(rnd.eval.verdict.value, 0) + 1
    tally = ", ".join(f"{k} x{v}" for k, v in counts.items())
    return f"{stop}: no correct candidate in {len(rounds)} round(s)" + (f" ({tally})." if tally else ".")


class Loop:
    def __init__(self, *, run: Run, store: RunStore, rounds: list[Round], proposer: Proposer,
                 evaluator: Evaluates, prompts: Prompts, system: str, first: str,
                 observer: Observer, elapsed: Callable[[], float], hidden_warnings: Iterable[str] = ()):
        self.run = run
        self.store = store
        self.rounds = rounds
        self.proposer = proposer
        self.evaluator = evaluator
        self.prompts = prompts
        self.system = system
        self.first = first
        self.observer = observer
        self.thresholds = Thresholds(run.settings.accept, run.settings.target)
        self.elapsed = elapsed  # seconds spent on the run, earlier sessions included
        self.hidden_warnings = frozenset(hidden_warnings)  # the problem's own: left out of the feedback
        self.spending = threading.Lock()  # samples asked at once add their tokens from threads
        self.seen: dict[str, tuple[int, EvalResult]] = {}  # source hash: first round and its result
        for rnd in rounds:
            self._remember(rnd)

    def execute(self) -> Run:
        run = self.run
        run.status, run.stop_reason, run.message = Status.RUNNING, StopReason.NONE, ""
        try:
            while not (reason := self._stop_reason()):
                rnd = self._round(len(self.rounds) + 1)
                self.rounds.append(rnd)
                self._record(rnd)
                self.observer.round_done(rnd)
            run.stop_reason, run.status = reason, Status.FINISHED
        except Exhausted:
            run.stop_reason, run.status = StopReason.FILES_EXHAUSTED, Status.FINISHED
            self.store.drop_unanswered(len(self.rounds) + 1)
        except OutOfTime as exc:
            # The round in flight stays unfinished on disk; --resume sets it aside.
            run.stop_reason, run.status = StopReason.WALL_TIME, Status.FINISHED
            run.message = f"Round {len(self.rounds) + 1} was left unfinished: {exc}."
        except KeyboardInterrupt:
            run.stop_reason, run.status = StopReason.INTERRUPTED, Status.INTERRUPTED
        except ProposerError as exc:
            # The round in flight stays unfinished on disk, as under OutOfTime; the best is kept.
            run.stop_reason, run.status = StopReason.PROPOSER, Status.FAILED
            run.message = str(exc)
            self.store.event("proposer_error", round=len(self.rounds) + 1, message=str(exc))
        except BaseException:
            run.stop_reason, run.status = StopReason.ERROR, Status.FAILED
            raise
        finally:
            settle(run, self.store, self.rounds, self.thresholds, self.elapsed(), self._conclusion())
        return run

    def _conclusion(self) -> str:
        """The run's closing sentence."""
        return conclusion(self.run, self.rounds, self.thresholds)

    def _stop_reason(self) -> StopReason:
        """The rule that ends the run now; NONE (falsy) while none does."""
        if reached := goal_reached(self.run, self.thresholds):
            return reached
        if spent := self._spent():
            return spent
        if self.run.settings.plateau and stalled(self._history()) >= self.run.settings.plateau:
            return StopReason.PLATEAU
        return StopReason.NONE

    def _spent(self) -> StopReason:
        """The budget (rounds, wall time, tokens, dollars) spent now; NONE (falsy) while none is."""
        s = self.run.settings
        if s.rounds is not None and len(self.rounds) >= s.rounds:
            return StopReason.ROUNDS
        if s.wall_time is not None and self.elapsed() >= s.wall_time:
            return StopReason.WALL_TIME
        if s.token_budget is not None and self.run.tokens.total >= s.token_budget:
            return StopReason.TOKENS
        if s.budget_usd is not None and cost_usd(self.run.tokens, s.prices) >= s.budget_usd:
            return StopReason.BUDGET
        return StopReason.NONE

    def _history(self) -> list[Past]:
        return [Past(r.n, r.eval, r.sample.approach) for r in self.rounds]

    def _prompt(self, n: int) -> tuple[str, bool]:
        """This round's prompt, and whether it restarts the conversation from the best."""
        if n == 1:
            return self.first, False
        last, history = self.rounds[-1], self._history()
        notes = self._notes(last)
        since, every = stalled(history), self.run.settings.restart_after
        fresh = bool(every and since and since % every == 0 and self.run.best)
        if fresh:
            notes.append(f"No measurable gain in {since} rounds. Start again from round {self.run.best.round}'s "
                         "candidate, the best (pinned above), with a different approach: another split of "
                         "the work over the hardware, fewer passes over memory, another kernel structure.")
        text = feedback_text(self.prompts, last.n, last.eval, self.thresholds, history[:-1],
                             last.sample.approach, notes, self.hidden_warnings, cpu=self.run.settings.device == "cpu")
        return text, fresh

    def _notes(self, last: Round) -> list[str]:
        """What the feedback on round `last` adds: a repeated candidate, the round's other samples, why
        there is no ncu profile."""
        notes = []
        if last.sample.same_as is not None:
            notes.append(f"This file is identical to round {last.sample.same_as}'s: its verdict is repeated "
                         "without building or measuring it again. Change something.")
        others = [sample_line(i, s.eval, s.direction, s.parent and (s.parent.round, s.parent.speedup))
                  for i, s in enumerate(last.samples) if i != last.chosen]
        if others:
            notes.append(f"The feedback above is on sample {last.chosen + 1} of {len(last.samples)}; the others: "
                         + "; ".join(others) + ".")
        note = self._fallback_note(last)
        if note:
            notes.append(f"{note}.")
        return notes

    def _fallback_note(self, rnd: Round) -> str:
        """Why there is no ncu profile, where round `rnd` is the first to say it."""
        return fallback_note([s.eval for s in rnd.samples],
                             [s.eval for r in self.rounds if r.n < rnd.n for s in r.samples])

    def _conversation(self, prompt: str, fresh: bool, direction: str = "", parent: Optional[Parent] = None,
                      members: tuple[Parent, ...] | list[Parent] = ()) -> Conversation:
        """One sample's conversation: the rounds since the last restart with the best candidate
        pinned; under --beam, its parent pinned in their place. The sample's direction follows
        the prompt."""
        asked = prompt + direction_line(direction)
        if parent is not None:  # drawn from `members`
            sample = self.rounds[parent.round - 1].samples[parent.sample]
            note = parent_note(Past(parent.round, sample.eval, sample.approach), members.index(parent) + 1,
                               len(members))
            return Conversation(self.system, [], asked, first=self.first,
                                pinned=Turn(note, strip_reasoning(sample.answer), parent.round))
        start = max((i for i, r in enumerate(self.rounds) if r.fresh), default=0)
        chain = [] if fresh else self.rounds[start:]
        turns = [Turn(r.prompt + direction_line(r.sample.direction), strip_reasoning(r.answer), r.n) for r in chain]
        pinned = None
        best = self.run.best
        if best is not None:
            sample = self.rounds[best.round - 1].samples[best.sample]
            note = pinned_note(Past(best.round, sample.eval, sample.approach))
            pinned = Turn(note, strip_reasoning(sample.answer), best.round)
        return Conversation(self.system, turns, asked, first=self.first, pinned=pinned)

    def _round(self, n: int) -> Round:
        started, t0 = utc_now(), time.monotonic()
        prompt, fresh = self._prompt(n)
        self.store.write_prompt(n, prompt)
        s = self.run.settings
        k = s.samples
        members = search.beam(self.rounds, s.beam) if s.beam else []
        plans = [(self._direction(n, i, k), search.draw(members, self.run.id, n, i)) for i in range(k)]

        def ask(i: int) -> Sample:
            direction, parent = plans[i]
            return self._ask(n, i, self._conversation(prompt, fresh, direction, parent, members), direction, parent)

        samples: list[Optional[Sample]] = [None] * k
        self._evaluate(n, samples, self._arrivals(ask, k))
        return Round(n=n, prompt=prompt, samples=samples, chosen=pick(samples), started=started,
                     seconds=time.monotonic() - t0, fresh=fresh)

    def _direction(self, n: int, i: int, k: int) -> str:
        """What round n's sample i of k is asked to try (--samples K)."""
        return search.direction(n, i, k, self.run.settings.device == "cpu")

    def _arrivals(self, ask: Callable[[int], Sample], k: int) -> Iterator[tuple[int, Sample]]:
        """A round's samples as their answers arrive: all asked at once where the proposer allows."""
        if k == 1 or not self.proposer.concurrent:
            for i in range(k):
                yield i, ask(i)
            return
        threads = ThreadPoolExecutor(k)
        futures = {threads.submit(ask, i): i for i in range(k)}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # on an error the others are not waited for
            threads.shutdown(wait=False, cancel_futures=True)

    def _phase(self, n: int, i: int, phase: str) -> None:
        self.observer.phase(n, i, phase)
        self.store.event("phase", round=n, sample=i + 1, phase=phase)

    def _ask(self, n: int, i: int, conversation: Conversation, direction: str = "",
             parent: Optional[Parent] = None) -> Sample:
        """One answer, recorded and extracted; evaluated as soon as it is handed on."""
        self._phase(n, i, "asking")
        wall_time = self.run.settings.wall_time
        time_left = None if wall_time is None else wall_time - self.elapsed()
        if time_left is not None and time_left <= 0:
            raise OutOfTime("the wall time ran out before this sample was asked for")
        proposal = self.proposer.propose(conversation, self.observer.say, time_left)
        # Tokens count as soon as they are spent, even if this round never finishes.
        with self.spending:
            self.run.tokens = self.run.tokens + proposal.tokens
        self.store.write_answer(n, i, proposal.answer)
        if proposal.code is not None:
            code, status, message = proposal.code, "given", ""
        else:
            found = extract(proposal.answer, cut_off=proposal.cut_off)
            code, status, message = found.code, found.status.value, found.message
        result, same_as = None, None
        if code is None:
            result = EvalResult(verdict=Verdict.NO_CODE, explanation=message, problem=self.run.problem.name)
        elif _digest(code) in self.seen:
            same_as, earlier = self.seen[_digest(code)]
            result = _repeated(earlier)
        return Sample(answer=proposal.answer, origin=proposal.origin, extraction=status,
                      candidate=code, eval=result, tokens=proposal.tokens,
                      ask_seconds=proposal.seconds, eval_seconds=0.0, cut_off=proposal.cut_off,
                      approach=approach(proposal.answer, code, APPROACH_CHARS), same_as=same_as,
                      direction=direction, parent=parent)

    def _evaluate(self, n: int, samples: list[Optional[Sample]], arrivals: Iterator[tuple[int, Sample]]) -> None:
        """A round's samples into `samples` as they arrive, each new candidate handed to the pool at
        once (built while the other answers are still coming, timed one per GPU); a sample
        identical to another of the round takes that one's result."""
        first: dict[str, int] = {}
        todo: list[int] = []  # the sample of each candidate handed on, in order

        def candidates() -> Iterator[str]:
            for i, sample in arrivals:
                samples[i] = sample
                if sample.candidate is None:
                    continue
                path = self.store.write_candidate(n, i, sample.candidate)
                if sample.eval is None and _digest(sample.candidate) not in first:
                    first[_digest(sample.candidate)] = i
                    todo.append(i)
                    yield str(path)

        t0 = time.monotonic()
        results = self.evaluator.evaluate(candidates(), on_event=lambda j, phase: self._phase(n, todo[j], phase))
        for i, result in zip(todo, results):
            samples[i].eval, samples[i].eval_seconds = result, result.seconds
        for sample in samples:
            if sample.eval is None:
                sample.eval, sample.same_as = _repeated(samples[first[_digest(sample.candidate)]].eval), n
        for i, sample in enumerate(samples):
            keep_result(self.store, n, i, sample.eval)
        self.store.event("evaluated", round=n, seconds=round(time.monotonic() - t0, 3))

    def _remember(self, rnd: Round) -> None:
        for sample in rnd.samples:
            if sample.candidate is not None:
                self.seen.setdefault(_digest(sample.candidate), (rnd.n, sample.eval))

    def _record(self, rnd: Round) -> None:
        self._remember(rnd)
        keep_round(self.run, self.store, rnd, self.elapsed())
        note = self._fallback_note(rnd)
        if note:
            self.observer.say(f"{note}.")
            self.store.event("note", round=rnd.n, text=note)


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _repeated(earlier: EvalResult) -> EvalResult:
    """An earlier round's verdict for an identical file, which is not built or measured again. Its
    explanation is the earlier one as it was: the sample's `same_as` and the next prompt's note say
    whose it is, so that the feedback states the error once."""
    return dataclasses.replace(earlier, seconds=0.0)


def absorb(run: Run, store: RunStore, rnd: Round) -> None:
    """Fold a finished round into the run's summary: best candidate, environment, table."""
    for i, sample in enumerate(rnd.samples):
        result = sample.eval
        if result.environment is not None:
            run.environment = result.environment
        # the run's best is the one surest of its speedup (the interval's lower end), the one a bar is read on
        if result.ok and result.speedup is not None and (run.best is None or assured(
                result.speedup, result.speedup_interval) > assured(run.best.speedup, run.best.interval)):
            where = store.round_dir(rnd.n, i).relative_to(store.path)
            run.best = Best(round=rnd.n, sample=i, speedup=result.speedup,
                            candidate=str(where / CANDIDATE_FILE), interval=result.speedup_interval,
                            degenerate=bool(result.problem_degenerate))
    run.rounds.append(RoundSummary(n=rnd.n, verdict=rnd.eval.verdict,
                                   speedup=rnd.eval.speedup if rnd.eval.ok else None,
                                   tokens=rnd.tokens.total, seconds=rnd.seconds,
                                   samples=len(rnd.samples), profile_seconds=rnd.profile_seconds,
                                   interval=rnd.eval.speedup_interval if rnd.eval.ok else None))


def keep_result(store: RunStore, n: int, i: int, result: EvalResult) -> None:
    """Sample i's result of round n on disk, and its line in the events."""
    store.write_eval(n, i, result)
    store.event("result", round=n, sample=i + 1, verdict=result.verdict.value,
                speedup=result.speedup if result.ok else None)


def keep_round(run: Run, store: RunStore, rnd: Round, seconds: float) -> None:
    """A finished round (its samples' files already written) recorded: round.json, the run's summary
    with `seconds` spent on the run so far, and its line in the events."""
    store.save_round(rnd)
    absorb(run, store, rnd)
    run.seconds = seconds
    store.save_run(run)
    store.event("round", round=rnd.n, verdict=rnd.eval.verdict.value, speedup=rnd.eval.speedup if rnd.eval.ok else None,
                tokens=rnd.tokens.total, seconds=round(rnd.seconds, 3))


def goal_reached(run: Run, thresholds: Thresholds) -> StopReason:
    """TARGET or CEILING where the run's best reaches one, NONE (falsy) while it reaches neither, or it is
    on a degenerate problem."""
    best = run.best
    if best is None or best.degenerate:
        return StopReason.NONE
    if clears(best.speedup, best.interval, thresholds.target):
        return StopReason.TARGET
    if run.ceiling and best.speedup >= CEILING_SHARE * run.ceiling:
        return StopReason.CEILING
    return StopReason.NONE


def settle(run: Run, store: RunStore, rounds: list[Round], thresholds: Thresholds, seconds: float,
           summary: Optional[str] = None) -> None:
    """A stopping run's outcome and closing sentence (`summary`, else conclusion's; after any message of its
    own), recorded."""
    run.outcome = outcome(run.best, thresholds)
    summary = summary or conclusion(run, rounds, thresholds)
    run.message = f"{run.message} {summary}".strip() if run.message else summary
    run.seconds = seconds
    store.save_run(run)
    store.event("stop", status=run.status, reason=run.stop_reason, outcome=run.outcome)


def restore(run: Run, store: RunStore, rounds: list[Round]) -> None:
    """Rebuild the run's summary from the rounds on disk (run.json may lag by a round)."""
    run.best, run.rounds, run.tokens = None, [], Tokens()
    for rnd in rounds:
        absorb(run, store, rnd)
        run.tokens = run.tokens + rnd.tokens
