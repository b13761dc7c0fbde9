"""The record of an optimization run, as runs/ holds it: the run (run.json), its rounds
(round.json, with their files beside it) and each round's samples; `to_json` and `from_json`
(results.py) carry them to disk and back, and store.py writes them where they belong.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

from ..results import Environment, EvalResult, Verdict
from ..tokens import Tokens
from .settings import Evaluation, Settings


@dataclass
class Sample:
    """One answer of a round and what became of it."""

    answer: str
    origin: str
    extraction: str  # an extract.Extraction value, or "given" where the answer is the file
    candidate: Optional[str]
    eval: EvalResult
    tokens: Tokens = field(default_factory=Tokens)
    ask_seconds: float = 0.0
    eval_seconds: float = 0.0
    cut_off: bool = False
    approach: str = ""  # the approach in the answer's own words, cut short
    same_as: Optional[int] = None  # the round whose identical candidate's verdict this repeats
    direction: str = ""  # the direction this sample was asked to take (--samples K)
    parent: Optional["Parent"] = None  # the candidate it was asked to improve (--beam N)
    audit: Optional["Audit"] = None  # the audit's second opinion, where --red-team judged it again

    @property
    def broke(self) -> bool:
        """Whether it broke the judge (--red-team): see Audit.broke."""
        return self.audit is not None and self.audit.broke


@dataclass
class Audit:
    """The audit's second opinion on a sample the fast verdict passed (sweep/audit.py's, under --red-team)."""

    agree: bool
    check: str = ""  # where it disagrees: the check that caught what the fast verdict missed
    why: str = ""  # where it disagrees, in one sentence
    finding: str = ""  # what the audit found (the finding verdicts.judged names); "" where it found nothing
    verdict: str = ""  # the audit's verdict
    speedup: Optional[float] = None
    interval: Optional[list[float]] = None
    seconds: float = 0.0
    # the fast verdict passed it at the acceptable speedup or more, and the audit disagrees
    broke: bool = False

    @property
    def text(self) -> str:
        """What the audit said, in a few words for a table."""
        return "agree" if self.agree else f"disagree: {self.check}"


@dataclass
class Parent:
    """A correct earlier candidate a sample starts from."""

    round: int
    sample: int  # 0-based
    speedup: float


@dataclass
class Round:
    n: int
    prompt: str
    samples: list[Sample]
    chosen: int = 0  # the sample the conversation carries on from
    started: str = ""
    seconds: float = 0.0
    fresh: bool = False  # its prompt restarted the conversation from the best candidate

    @property
    def sample(self) -> Sample:
        return self.samples[self.chosen]

    @property
    def answer(self) -> str:
        return self.sample.answer

    @property
    def candidate(self) -> Optional[str]:
        return self.sample.candidate

    @property
    def eval(self) -> EvalResult:
        return self.sample.eval

    @property
    def profile_seconds(self) -> float:
        """What profiling its samples cost (--profile)."""
        return sum(s.eval.profile.seconds for s in self.samples if s.eval and s.eval.profile)

    @property
    def broke(self) -> bool:
        """Whether a sample of it broke the judge (--red-team)."""
        return any(s.broke for s in self.samples)

    @property
    def audit_text(self) -> str:
        """What the audit said of its samples, in a few words for a table; "-" where it judged none."""
        return "; ".join(s.audit.text for s in self.samples if s.audit) or "-"

    @property
    def tokens(self) -> Tokens:
        total = Tokens()
        for s in self.samples:
            total = total + s.tokens
        return total


@dataclass
class RoundSummary:
    n: int
    verdict: Verdict
    speedup: Optional[float]
    tokens: int
    seconds: float
    samples: int = 1
    profile_seconds: float = 0.0  # of `seconds`, spent profiling (--profile)
    interval: Optional[list[float]] = None  # the speedup's, 95%


@dataclass
class ProblemRef:
    path: str
    name: str
    sha256: str


@dataclass
class Best:
    round: int
    sample: int  # 0-based index into the round's samples
    speedup: float
    candidate: str  # path relative to the run directory
    interval: Optional[list[float]] = None  # the speedup's, 95% (None in runs recorded before it was kept)
    degenerate: bool = False  # on a degenerate problem (EvalResult.problem_degenerate): its speedup measures nothing


class Status(enum.StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class StopReason(enum.StrEnum):
    NONE = ""  # still running
    TARGET = "target"
    ROUNDS = "rounds"
    WALL_TIME = "wall_time"
    TOKENS = "tokens"
    FILES_EXHAUSTED = "files_exhausted"
    PLATEAU = "plateau"  # rounds without a measurable gain, after a restart from the best
    BUDGET = "budget"  # --budget-usd spent
    CEILING = "ceiling"  # the best is within reach of the physical ceiling: no target above it is reachable
    INTERRUPTED = "interrupted"
    PROPOSER = "proposer"  # the endpoint (or the files) failed past its retries; --resume carries the run on
    SESSION = "session"  # the agent's session through `harness mcp` ended (the agent (mcp) proposer's runs)
    ERROR = "error"


class Outcome(enum.StrEnum):
    NONE = ""  # not decided yet
    TARGET = "target"
    ACCEPTED = "accepted"
    BELOW_ACCEPT = "below_accept"
    NO_CORRECT = "no_correct"


@dataclass
class Run:
    id: str
    settings: Settings
    problem: ProblemRef
    created: str
    updated: str = ""
    status: Status = Status.RUNNING
    stop_reason: StopReason = StopReason.NONE
    outcome: Outcome = Outcome.NONE
    message: str = ""
    environment: Optional[Environment] = None
    seconds: float = 0.0  # time spent running, summed over resumes
    tokens: Tokens = field(default_factory=Tokens)
    best: Optional[Best] = None
    rounds: list[RoundSummary] = field(default_factory=list)
    evaluation: Optional[Evaluation] = None  # None in runs recorded before it was kept
    heartbeat: str = ""  # refreshed while a process runs it; "" in runs recorded before it was kept
    # the highest speedup the hardware allows: the reference's time over its floor plus host time
    ceiling: Optional[float] = None
    notes: list[str] = field(default_factory=list)  # said at the start, for whoever reads the run later
