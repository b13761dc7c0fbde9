"""Prompt rendering: jinja2 templates from prompts/, or from a directory of one's own.

A directory given with --prompts only needs the templates it changes; the
others come from the built-in set. Rendering is pure: context in, text out.
Undefined names are errors, so a typo in a template is caught on first use.
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import jinja2

from ..degenerate import problem_text
from ..errors import HarnessError
from ..integrity.roofline import flops_text, roofline_text

if TYPE_CHECKING:
    from ..device import DeviceInfo
    from ..engine.processes.protocol import ReferenceReady
    from ..integrity.roofline import Headroom
    from ..problem import Problem
    from ..results import Environment



def _builtin_dir() -> Path:
    """The templates installed with the package (pyproject maps prompts/ to harness/prompts_data);
    in a source checkout, and so in an editable install, prompts/ at the top of the repository."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "prompts_data"
    return installed if installed.is_dir() else package.parent / "prompts"


BUILTIN_DIR = _builtin_dir()
SYSTEM = "system.j2"
FIRST = "first.j2"
FEEDBACK = "feedback.j2"
CANDIDATE = "candidate.py.j2"  # the file a person starts from (human proposer)
IDIOM = "idiom.py.j2"  # the quick-building example, included by FIRST and CANDIDATE
IDIOM_CPU = "idiom_cpu.py.j2"  # its counterpart for --device cpu: C++ alone, for CPU tensors
# --red-team's: the model's role, the first prompt (the goal and how the judge checks and times), the feedback
RED_TEAM_SYSTEM, RED_TEAM, RED_TEAM_FEEDBACK = "red_team_system.j2", "red_team.j2", "red_team_feedback.j2"
TEMPLATES = (SYSTEM, FIRST, FEEDBACK, CANDIDATE, IDIOM, IDIOM_CPU, RED_TEAM_SYSTEM, RED_TEAM, RED_TEAM_FEEDBACK)


class Reader(Enum):
    """Who reads a prompt or a feedback, which words it gets: the loop's model (LOOP) answers with a
    ```python block and finds its best candidate pinned in its conversation; an agent sends files, in a
    run whose rounds are kept (RUN) or in a call of its own (CALL), which has no rounds to number,
    compare or finish."""

    LOOP = "loop"
    RUN = "run"
    CALL = "call"

    @property
    def agent(self) -> bool:
        return self is not Reader.LOOP

    @property
    def rounds(self) -> bool:
        return self is not Reader.CALL


class PromptError(HarnessError):
    """A template that cannot be loaded or rendered; one paragraph for a person."""


class Prompts:
    def __init__(self, directory: Optional[str | Path] = None):
        search = [str(BUILTIN_DIR)]
        if directory is not None:
            directory = Path(directory)
            if not directory.is_dir():
                raise PromptError(f"Prompts directory {directory} does not exist.")
            if not any((directory / name).is_file() for name in TEMPLATES):
                raise PromptError(
                    f"Prompts directory {directory} holds none of the templates "
                    f"{', '.join(TEMPLATES)}; copy the ones to change from {BUILTIN_DIR}.")
            search.insert(0, str(directory))
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(search), undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
            autoescape=False)

    def render(self, name: str, **context: Any) -> str:
        try:
            template = self.env.get_template(name)
            return template.render(**context)
        except jinja2.TemplateSyntaxError as exc:
            raise PromptError(f"Prompt template {exc.filename or name} has a syntax error at line "
                              f"{exc.lineno}: {exc.message}.") from None
        except jinja2.UndefinedError as exc:
            raise PromptError(f"Prompt template {self.path(name)} uses a name the harness does not "
                              f"provide: {exc.message}. Names given: {', '.join(sorted(context))}.") from None
        except jinja2.TemplateNotFound:
            raise PromptError(f"Prompt template {name} was not found.") from None

    def path(self, name: str) -> str:
        source, filename, _ = self.env.loader.get_source(self.env, name)
        return filename or name


def tolerance_text(problem: "Problem") -> str:
    if problem.atol is not None or problem.rtol is not None:
        atol, rtol = problem.tolerances("float32")
        return f"atol={atol:g}, rtol={rtol:g}"
    return "atol=rtol=1e-4 for float32 outputs (1e-2 for float16 and bfloat16)"


def grad_tolerance_text(problem: "Problem", allowance: Optional[dict[str, float]] = None) -> str:
    """The gradients' tolerance where the problem sets its own (GRAD_ATOL, GRAD_RTOL), else the
    outputs', each atol plus the reference's own rounding where it was measured (`allowance`,
    ReferenceReady.grad_allowance)."""
    if problem.grad_atol is None and problem.grad_rtol is None:
        widest = max((allowance or {}).values(), default=0.0)
        return tolerance_text(problem) + (f", each gradient's atol plus the reference's own float32 rounding "
                                          f"(measured against float64; at most {widest:.2g})" if widest else "")
    atol, rtol = problem.tolerances("float32", gradients=True)
    return f"atol={atol:g}, rtol={rtol:g}"


# An empty call's share of the reference's time above which a GPU reference is host-bound.
HOST_BOUND = 0.3


def where_time_goes(reference_ms: float, host_ms: float, *, cpu: bool) -> str:
    """One line on the reference's time against the fixed cost of a call (an empty call's time under
    the same clock): always on a CPU, on a GPU only where the reference is host-bound."""
    if reference_ms <= 0 or host_ms <= 0:
        return ""
    share = host_ms / reference_ms
    said = (f"Where the time goes: a call that does nothing takes {host_ms:.2g} ms here, {share:.0%} of the "
            f"reference's {reference_ms:.4g} ms")
    if not cpu:
        if share < HOST_BOUND:
            return ""
        return (said + ": the reference is host-bound (Python and launches take the time), so fewer launches, "
                "one fused kernel, gain more than faster ones.")
    if share >= 0.5:
        return (said + ": at this size the fixed cost of a call dominates, so one C++ call with no Python-side "
                "work and one output allocation gains more than a faster loop.")
    return (said + "; the rest is the reference's own work: dispatch, allocation and the loop over memory. "
            "Your call pays the same fixed costs (the Python call, argument checks, the output's allocation) "
            "besides its loop, so keep them few at small sizes.")


def system_prompt(prompts: Prompts, *, cpu: bool = False) -> str:
    """The model's role: CUDA kernels, or C++ for the CPU (`cpu`, a run on --device cpu)."""
    return prompts.render(SYSTEM, cpu=cpu).strip()


def first_prompt(prompts: Prompts, problem: "Problem", device: "DeviceInfo", *, accept: float, target: float,
                 trials: int, facts: "ReferenceReady", environment: "Environment",
                 headroom: Optional["Headroom"] = None, backward: bool = False, unmeasured: bool = False,
                 reader: Reader = Reader.LOOP) -> str:
    """The problem, the rules, and the facts the reference process found: hardware, measured
    peaks, how the inputs arrive, versions; and the reference's own time against its floor.
    `backward`: the backward pass is checked and timed too, and the contract for it is given.
    `unmeasured`: the reference was not timed (a dry run), and the prompt says where its time goes.
    `reader`: an agent is asked to send its file, not to end an answer with it.
    A degenerate problem (facts.degenerate) is said to be one, plainly, after its source."""
    reference = None
    if headroom is not None:
        reference = {"ms": headroom.reference_ms, "host_ms": headroom.host_ms, "ceiling": headroom.ceiling,
                     "roofline": roofline_text(headroom.roofline) if headroom.roofline else "",
                     "where": where_time_goes(headroom.reference_ms, headroom.host_ms, cpu=device.arch == "cpu")}
    return prompts.render(FIRST, problem=problem, device=device, tolerance=tolerance_text(problem),
                          accept=accept, target=target, trials=trials, hardware=facts.hardware,
                          inputs=facts.inputs, peaks=facts.peaks, environment=environment,
                          peaks_flops=flops_text(facts.peaks.tflops_fp32) if facts.peaks else "",
                          reference=reference, unmeasured=unmeasured, backward=backward, agent=reader.agent,
                          degenerate=problem_text(facts.degenerate),
                          grad_tolerance=grad_tolerance_text(problem, facts.grad_allowance) if backward else ""
                          ).strip() + "\n"


def candidate_template(prompts: Prompts, problem: "Problem", *, accept: float, target: float,
                       cpu: bool = False) -> str:
    """The file a person starts from; with `cpu`, its idiom is C++ for CPU tensors."""
    return prompts.render(CANDIDATE, problem=problem, accept=accept, target=target, cpu=cpu)
