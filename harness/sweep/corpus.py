"""The corpus of attacks (tests/adversarial/): each case file says, in comment lines at its top, the
invariant it tests, the problem it runs on, the devices where its attack exists and the verdict it must
get. The header is read from the text alone (a case is untrusted code, never imported to be described):

    # invariant: stream_order
    # problem: tests/problems/small_layernorm.py
    # problem[cuda]: problems/layernorm_4d.py        (optional: another problem on that device)
    # device: cuda
    # expect: incorrect "does not wait for the caller's stream"
    # expect[strict]: rejected "reaches into the harness"   (optional: under --policy strict)
    # expect[audit]: incorrect "not on them scaled by 1000"  (optional: under the audit, every check at its strictest)
    # options: backward                              (optional: judged under --backward)

An expectation is one or more outcomes separated by `|`, each a verdict, then fragments in double quotes
of which the explanation must hold one (for `correct`, one of the warnings), then `under 1.5x` where the
speedup must stay below that. Pure functions of the text and of results."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from ..errors import HarnessError
from ..results import EvalResult, Verdict

# The invariants a case may test (docs/guards.md), in the order the corpus sweep's table lists them
INVARIANTS = (
    "stream_order", "hidden_work",  # a GPU's stream order; the per-stream trace of work outside the window
    "reference_reach",  # the reference, its timing and its outputs out of the candidate's reach
    # what the harness calls left as it was: functions, operators' kernels, modes, TF32 switches, threads,
    # adopted processes, persisting L2
    "runtime_guards",
    "precision", "fresh_outputs", "fresh_inputs", "checked_calls", "inputs_unchanged",
    "output_form",  # plain tensors of the reference's dtype
    "parameters",  # moved off their initial values
    "forged_channel", "below_floor", "static_policy", "problem_lint",
    "other_inputs",  # an audit's: the inputs moved to other magnitudes (integrity/distributions.py)
)
DEVICES = ("cpu", "cuda")
OPTIONS = ("backward",)
STRICT, AUDIT = "strict", "audit"  # the qualifiers of `expect`: the expectation under --policy strict, under the audit
KEYS = ("invariant", "problem", "device", "expect", "options")
_LINE = re.compile(r"#\s*([a-z_]+)(?:\[([^\]]*)\])?:\s*(.*?)\s*$")
_TOKEN = re.compile(r'"([^"]*)"|(\S+)')
_UNDER = re.compile(r"(\d+(?:\.\d*)?)x")
FORMAT = ("A case's header is comment lines at the top of its file: `# invariant: NAME` (one of "
          + ", ".join(INVARIANTS) + "), `# problem: PATH` (`# problem[cuda]: PATH` for another on a device), "
          "`# device: cpu cuda` (one or both), and `# expect: VERDICT \"FRAGMENT\"` (outcomes separated by `|`, "
          "`under 1.5x` for a speedup bound; `# expect[strict]:` under --policy strict, `# expect[audit]:` under the "
          "audit); see docs/guards.md.")


class CorpusError(HarnessError):
    """A case file whose header is missing or malformed; the message is one paragraph naming it."""


@dataclass(frozen=True)
class Outcome:
    """A verdict, with a fragment of which the explanation (a warning, for `correct`) holds one, and a
    speedup it must stay under."""

    verdict: Verdict
    says: tuple[str, ...] = ()
    under: Optional[float] = None

    def met(self, result: EvalResult) -> bool:
        if result.verdict is not self.verdict:
            return False
        said = result.warnings if self.verdict is Verdict.CORRECT else [result.explanation]
        if self.says and not any(fragment in text for fragment in self.says for text in said):
            return False
        return self.under is None or (result.speedup is not None and result.speedup < self.under)

    def __str__(self) -> str:
        return " ".join([self.verdict.value, *(f'"{s}"' for s in self.says),
                         *([f"under {self.under:g}x"] if self.under is not None else [])])


@dataclass(frozen=True)
class Expectation:
    """What a case must get: any one of `outcomes`; under --policy strict where `strict`, under the audit (every
    check at its strictest: harness audit) where `audit`."""

    outcomes: tuple[Outcome, ...]
    qualifier: str = ""  # the `expect[...]` it was given under: "", STRICT or AUDIT

    @property
    def strict(self) -> bool:
        return self.qualifier == STRICT

    @property
    def audit(self) -> bool:
        return self.qualifier == AUDIT

    def met(self, result: EvalResult) -> bool:
        return any(outcome.met(result) for outcome in self.outcomes)

    def __str__(self) -> str:
        under = {STRICT: " (under --policy strict)", AUDIT: " (under the audit)"}.get(self.qualifier, "")
        return " | ".join(map(str, self.outcomes)) + under


@dataclass(frozen=True)
class Case:
    """One case file's header. `problem` as written (a path from the repository's root or the case's
    folder), `problems` where a device has its own."""

    name: str
    invariant: str
    devices: tuple[str, ...]
    problem: str
    expectations: tuple[Expectation, ...]
    problems: tuple[tuple[str, str], ...] = ()
    backward: bool = False

    def problem_on(self, device: str) -> str:
        return dict(self.problems).get(device_kind(device), self.problem)

    def expected_on(self, device: str) -> tuple[Expectation, ...]:
        """Its expectations on `device` ("cpu", "cuda", "cuda:1"); none where its attack does not exist there."""
        return self.expectations if device_kind(device) in self.devices else ()


def device_kind(device: str) -> str:
    return device.split(":")[0]


def parse_case(text: str, path: Path) -> Case:
    """The header of the case file at `path`, whose text is `text`: the comment lines it opens with."""
    def fail(what: str, line: Optional[int] = None) -> CorpusError:
        where = f"Case file {path}" + (f", line {line}," if line else "")
        return CorpusError(f"{where} {what}. {FORMAT}")

    found: dict[str, list[tuple[Optional[str], str, int]]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("#"):
            break
        match = _LINE.match(line)
        if match:
            key, qualifier, value = match.groups()
            if key not in KEYS:
                raise fail(f"has a header line `{key}:`, which is none of {', '.join(KEYS)}", number)
            found.setdefault(key, []).append((qualifier, value, number))
    missing = [key for key in ("invariant", "problem", "device", "expect") if key not in found]
    if missing:
        raise fail(f"has no {', no '.join(missing)} line in the comment lines it opens with")
    for key in ("invariant", "device", "options"):
        lines = found.get(key, [])
        if len(lines) > 1 or any(qualifier is not None for qualifier, _, _ in lines):
            raise fail(f"gives `{key}` more than once or qualified; it takes one plain line", lines[-1][2])
    (_, invariant, number), = found["invariant"]
    if invariant not in INVARIANTS:
        raise fail(f"names the invariant `{invariant}`, which is none of the corpus's", number)
    (_, listed, number), = found["device"]
    devices = tuple(listed.replace(",", " ").split())
    if not devices or any(d not in DEVICES for d in devices):
        raise fail(f"names the devices `{listed}`; each must be one of {', '.join(DEVICES)}", number)
    options = found.get("options", [(None, "", 0)])[0]
    if any(o not in OPTIONS for o in options[1].split()):
        raise fail(f"names the options `{options[1]}`; the only one is {', '.join(OPTIONS)}", options[2])
    problem, problems = _problems(found["problem"], devices, fail)
    return Case(path.stem, invariant, devices, problem, _expectations(found["expect"], fail), problems,
                "backward" in options[1].split())


def _problems(lines: list, devices: tuple[str, ...], fail) -> tuple[str, tuple[tuple[str, str], ...]]:
    plain = [value for qualifier, value, _ in lines if qualifier is None]
    if len(plain) != 1 or not plain[0]:
        raise fail("needs one plain `problem:` line naming a problem file", lines[0][2])
    own = []
    for qualifier, value, number in lines:
        if qualifier is not None and (qualifier not in devices or not value or qualifier in dict(own)):
            raise fail(f"gives `problem[{qualifier}]`; a qualified problem is one per device the case lists "
                       f"({', '.join(devices)}), with a path", number)
        if qualifier is not None:
            own.append((qualifier, value))
    return plain[0], tuple(own)


def _expectations(lines: list, fail) -> tuple[Expectation, ...]:
    expectations, seen = [], set()
    for qualifier, value, number in lines:
        if qualifier not in (None, STRICT, AUDIT) or qualifier in seen:
            raise fail(f"gives `expect{f'[{qualifier}]' if qualifier else ''}` again or qualified other than "
                       f"[{STRICT}] or [{AUDIT}]; a case has at most one expectation for each way it is judged", number)
        seen.add(qualifier)
        try:
            expectations.append(Expectation(parse_outcomes(value), qualifier or ""))
        except ValueError as exc:
            raise fail(f"expects `{value}`, which does not read: {exc}", number) from None
    return tuple(expectations)


def parse_outcomes(value: str) -> tuple[Outcome, ...]:
    """`incorrect "a" "b" | rejected "c"`, `correct under 1.5x`: ValueError saying what does not read."""
    alternatives: list[list[tuple[str, str]]] = [[]]
    for quoted, bare in _TOKEN.findall(value):
        if bare == "|":
            alternatives.append([])
        else:
            alternatives[-1].append((quoted, bare))
    return tuple(_outcome(tokens) for tokens in alternatives)


def _outcome(tokens: list[tuple[str, str]]) -> Outcome:
    verdicts = {v.value: v for v in Verdict}
    if not tokens or tokens[0][1] not in verdicts:
        raise ValueError(f"each outcome begins with a verdict ({', '.join(verdicts)})")
    says, rest = [], []
    for quoted, bare in tokens[1:]:
        if bare:
            rest.append(bare)
        elif rest:
            raise ValueError("fragments in double quotes come right after the verdict")
        elif not quoted:
            raise ValueError("a fragment in double quotes is empty")
        else:
            says.append(quoted)
    bound = _UNDER.fullmatch(rest[1]) if len(rest) == 2 and rest[0] == "under" else None
    if rest and bound is None:
        raise ValueError(f"`{' '.join(rest)}` is not a speedup bound such as `under 1.5x`")
    return Outcome(verdicts[tokens[0][1]], tuple(says), float(bound.group(1)) if bound else None)


@dataclass
class InvariantTally:
    """The corpus sweep's figures for one invariant: the cases caught and missed, by label."""

    invariant: str
    caught: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def tally(judged: Iterable[tuple[str, str, bool]]) -> list[InvariantTally]:
    """(invariant, case label, caught) triples counted per invariant, in INVARIANTS' order."""
    tallies: dict[str, InvariantTally] = {}
    for invariant, label, caught in judged:
        entry = tallies.setdefault(invariant, InvariantTally(invariant))
        (entry.caught if caught else entry.missed).append(label)
    return sorted(tallies.values(), key=lambda t: (INVARIANTS.index(t.invariant) if t.invariant in INVARIANTS
                                                   else len(INVARIANTS), t.invariant))


def tally_rows(tallies: list[InvariantTally]) -> tuple[list[str], list[list[str]]]:
    """The per-invariant table: headers, then a row an invariant and a last row of totals."""
    rows = [[t.invariant, str(len(t.caught)), str(len(t.missed)), ", ".join(t.missed)] for t in tallies]
    rows.append(["all", str(sum(len(t.caught) for t in tallies)), str(sum(len(t.missed) for t in tallies)), ""])
    return ["invariant", "caught", "missed", "missed cases"], rows
