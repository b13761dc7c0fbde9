"""What a sweep evaluates: (problem, candidate) pairs, found in KernelBench's generation
layout, by matching file names, from the best rounds of earlier runs, made as copies of
each problem's own Model, or read from a corpus of attacks' headers (corpus.py)."""
from __future__ import annotations

import re
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ..engine.options import EvalOptions
from ..errors import HarnessError
from ..files import write_atomic
from ..runs.history import load
from .corpus import Case, CorpusError, Expectation, parse_case

COPY = "copy"  # the label of a job that is its problem's own Model as ModelNew (harness sweep --copies)

_SAMPLE = re.compile(r"(?:^|_)sample_(\d+)(?:_kernel)?$")
# KernelBench's scripts/generate_samples.py writes every sample of a run into one folder by this name
_FLAT = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")


class SuiteError(HarnessError):
    """A suite that cannot be read; the message is one paragraph for a person."""


@dataclass(frozen=True)
class Job:
    problem: Path
    level: str
    candidate: Path
    label: str  # the candidate as records name it: stable across runs of the sweep (a copy's temp dir is not)
    sample: int = 0
    # a corpus case (harness sweep --adversarial): its header, and the expectation this job holds it to
    case: Optional[Case] = None
    expect: Optional[Expectation] = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.level, self.problem.stem, self.label)


def problem_id(path: Path) -> str:
    """KernelBench's id: the number before the first underscore (19_ReLU.py -> 19), else the stem."""
    head = path.stem.split("_", 1)[0]
    return head if head.isdigit() else path.stem


def problem_levels(problems: Path) -> dict[str, list[Path]]:
    """The problem files by level: the `level*` directories under `problems`, or `problems` itself as one."""
    if not problems.is_dir():
        raise SuiteError(f"Problem directory {problems} does not exist or is not a directory.")
    levels = {d.name: sorted(d.glob("*.py")) for d in sorted(problems.iterdir())
              if d.is_dir() and d.name.startswith("level")}
    levels = {name: files for name, files in levels.items() if files} or {problems.name: sorted(problems.glob("*.py"))}
    if not any(levels.values()):
        raise SuiteError(f"Problem directory {problems} holds no .py problem files, directly or under level*/.")
    return levels


def _sample(path: Path) -> int:
    match = _SAMPLE.search(path.stem)
    return int(match.group(1)) if match else 0


def _flat(problem: Path, level: str, root: Path) -> list[Path]:
    """KernelBench's <root>/level_<n>_problem_<id>_sample_<k>_kernel.py: <n> is the level's
    number (level1 -> 1), any where the level's name has none."""
    number = re.sub(r"\D", "", level).lstrip("0")
    found = [path for path in root.glob(f"level_*_problem_{problem_id(problem)}_sample_*_kernel.py")
             if (match := _FLAT.fullmatch(path.name)) and (not number or match.group(1).lstrip("0") == number)]
    return sorted(found, key=_sample)


def _candidates_for(problem: Path, level: str, root: Path) -> list[Path]:
    """KernelBench's <root>/<id>/sample_<k>.py or <root>/level_<n>_problem_<id>_sample_<k>_kernel.py,
    else <root>/<stem>.py, else <root>/<stem>/*.py."""
    by_id = root / problem_id(problem)
    if by_id.is_dir() and problem_id(problem) != problem.stem:
        return sorted(by_id.glob("sample_*.py"), key=_sample)
    if problem_id(problem) != problem.stem and (flat := _flat(problem, level, root)):
        return flat
    if (root / f"{problem.stem}.py").is_file():
        return [root / f"{problem.stem}.py"]
    return sorted((root / problem.stem).glob("*.py")) if (root / problem.stem).is_dir() else []


def candidates_of(problem: Path, level: str, candidates: Path) -> list[Path]:
    """A problem's candidate files under `candidates`, in `candidates/<level>/` where that exists."""
    root = candidates / level if (candidates / level).is_dir() else candidates
    return _candidates_for(problem, level, root)


def find_jobs(problems: Path, candidates: Path) -> list[Job]:
    """Every problem with each candidate found for it; problems without one are left out."""
    if not candidates.is_dir():
        raise SuiteError(f"Candidate directory {candidates} does not exist or is not a directory.")
    jobs = []
    for level, files in problem_levels(problems).items():
        for problem in files:
            jobs += [Job(problem, level, c, str(c.relative_to(candidates)), _sample(c))
                     for c in candidates_of(problem, level, candidates)]
    if not jobs:
        raise SuiteError(f"No candidate in {candidates} matches a problem in {problems}: expected "
                         "<candidates>/<level>/<problem id>/sample_<k>.py or "
                         "<candidates>/level_<n>_problem_<problem id>_sample_<k>_kernel.py (KernelBench's "
                         "layouts), <candidates>/<problem name>.py or <candidates>/<problem name>/*.py.")
    return jobs


COPY_SUFFIX = "\n\nclass ModelNew(Model):  # harness sweep --copies: the reference itself\n    pass\n"


def write_copy(problem: Path, directory: Path) -> Path:
    """A candidate that is the problem's own Model: its source plus a subclass (an import of the
    problem would not do: the candidate is imported in another process, from another place)."""
    copy = directory / problem.name
    try:
        copy.write_text(problem.read_text() + COPY_SUFFIX)
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"Problem file {problem} cannot be read to copy: {exc}.") from None
    return copy


def copy_jobs(problems: Path, into: Path) -> list[Job]:
    """Each problem with one candidate: its own copy (write_copy), written under `into`."""
    jobs = []
    for level, files in problem_levels(problems).items():
        (into / level).mkdir(parents=True, exist_ok=True)
        jobs += [Job(problem, level, write_copy(problem, into / level), COPY) for problem in files]
    return jobs


def run_jobs(runs: list[str], runs_dir: Path, level: str = "runs") -> list[Job]:
    """The best candidate of each run, against the problem file it recorded."""
    jobs = []
    for run in runs:
        store, record = load(run, runs_dir)
        if record.best is None:
            raise SuiteError(f"Run {store.path} has no correct candidate to evaluate.")
        candidate = store.path / record.best.candidate
        problem = Path(record.problem.path)
        if not problem.is_file():
            raise SuiteError(f"Run {store.path} was of problem {problem}, which is no longer there.")
        jobs.append(Job(problem, level, candidate, store.id))
    return jobs


STRICT_LABEL, AUDIT_LABEL = " (strict)", " (audit)"  # after a case's name: its job under --policy strict, the audit


def corpus_cases(folder: Path) -> list[tuple[Path, Case]]:
    """Every case file in `folder` with its header, read as text (a case is never imported to be described)."""
    if not folder.is_dir():
        raise SuiteError(f"Corpus directory {folder} does not exist or is not a directory.")
    cases = []
    for path in sorted(folder.glob("*.py")):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CorpusError(f"Case file {path} cannot be read: {exc}.") from None
        cases.append((path, parse_case(text, path)))
    if not cases:
        raise SuiteError(f"Corpus directory {folder} holds no .py case files.")
    return cases


def problem_of(case_file: Path, written: str) -> Path:
    """A case's problem as its header writes it: absolute, else from the repository's root or the case's
    folder: the case's folder and each one above it are tried in turn, the first that holds it wins."""
    folder = case_file.parent.resolve()
    for base in (folder, *folder.parents):
        if (base / written).is_file():
            return base / written
    raise CorpusError(f"Case file {case_file} runs on the problem {written}, which is neither in its folder nor "
                      "under any folder above it: give the path from the repository's root, or an absolute one.")


def corpus_jobs(folder: Path, device: str) -> list[Job]:
    """A job for each expectation of each case whose attack exists on `device`, on its problem for that
    device; the level is the corpus folder's name, a job under --policy strict or the audit labelled apart."""
    jobs = [Job(problem_of(path, case.problem_on(device)), folder.name, path,
                case.name + (STRICT_LABEL if expect.strict else AUDIT_LABEL if expect.audit else ""), case=case,
                expect=expect)
            for path, case in corpus_cases(folder) for expect in case.expected_on(device)]
    if not jobs:
        raise SuiteError(f"Corpus directory {folder} holds no case whose attack exists on {device}.")
    return jobs


def by_options(jobs: list[Job], options: EvalOptions) -> list[tuple[EvalOptions, list[Job]]]:
    """The jobs by the options they are judged under: a corpus case's policy, backward pass and audit are its
    header's; every other job's are `options`."""
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        key = (job.expect.strict, job.case.backward, job.expect.audit) if job.case and job.expect else None
        groups.setdefault(key, []).append(job)
    return [(options if key is None else _as_expected(options, *key), group) for key, group in groups.items()]


def _as_expected(options: EvalOptions, strict: bool, backward: bool, audit: bool) -> EvalOptions:
    judged = replace(options, policy="strict" if strict else "warn", backward=backward)
    return judged.audited() if audit else judged


SOURCE_FILE = "sweep.json"  # in a sweep's results folder: what it evaluated, for `harness audit` to find again


@dataclass
class SweepSource:
    """Where a sweep's jobs come from: problems with candidates, problems as their own copies, runs, or a
    corpus of attacks, its cases for `device`."""

    problems: Optional[Path] = None
    candidates: Optional[Path] = None
    copies: bool = False
    runs: Optional[list[str]] = None
    runs_dir: Optional[Path] = None
    adversarial: Optional[Path] = None
    device: str = "cpu"

    def jobs(self, scratch: Path) -> list[Job]:
        """The jobs, copies written under `scratch`; a source that names too little or too much is a SuiteError."""
        if self.adversarial:
            if self.problems or self.copies or self.runs:
                raise SuiteError("Give either --adversarial DIR or problems (with candidates, --copies or --runs), "
                                 "not both: each case of the corpus names its own problem.")
            return corpus_jobs(self.adversarial, self.device)
        if self.runs:
            if self.problems or self.copies:
                raise SuiteError("Give either --runs RUN ... or a problem directory, not both.")
            return run_jobs(self.runs, self.runs_dir or Path("runs"))
        if self.problems is None:
            raise SuiteError("Give a problem directory (with a candidate directory or --copies), or --runs RUN ....")
        if self.copies:
            if self.candidates:
                raise SuiteError("Give either a candidate directory or --copies, not both.")
            return copy_jobs(self.problems, scratch)
        if self.candidates is None:
            problem_levels(self.problems)  # a missing problem directory is said first
            raise SuiteError(f"Give a candidate directory after {self.problems}, or --copies.")
        return find_jobs(self.problems, self.candidates)

    def write(self, folder: Path) -> None:
        """Kept beside the results, every path absolute, so the sweep can be found again from anywhere."""
        def absolute(path: Optional[Path]) -> Optional[str]:
            return str(Path(path).resolve()) if path else None

        write_atomic(folder / SOURCE_FILE, json.dumps({
            "problems": absolute(self.problems), "candidates": absolute(self.candidates), "copies": self.copies,
            "runs": self.runs, "runs_dir": absolute(self.runs_dir), "adversarial": absolute(self.adversarial),
            "device": self.device}, indent=2))

    @classmethod
    def read(cls, folder: Path) -> "SweepSource":
        path = folder / SOURCE_FILE
        try:
            found = json.loads(path.read_text())
            return cls(Path(found["problems"]) if found.get("problems") else None,
                       Path(found["candidates"]) if found.get("candidates") else None, bool(found.get("copies")),
                       found.get("runs"), Path(found["runs_dir"]) if found.get("runs_dir") else None,
                       Path(found["adversarial"]) if found.get("adversarial") else None, found.get("device", "cpu"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SuiteError(f"Sweep folder {folder} has no readable {SOURCE_FILE} ({exc}): it was written before "
                             "sweeps kept one, or by hand. Sweep it again to audit it.") from None
