"""What an agent reads of `harness mcp` before any call: the server's instructions and its tools'
descriptions, in the words of the device the server judges on (C++ and the torch profiler on a CPU,
CUDA and Nsight Compute on a GPU); and, in one sentence, arguments a tool's schema refuses. Pure: the
device (or the refusal) in, text out."""
from __future__ import annotations

from typing import Any, NamedTuple


class Words(NamedTuple):
    """What differs between a CPU server's texts and a GPU server's."""

    kernels: str  # what a candidate compiles
    hardware: str  # what describe_problem says of the hardware
    build: str  # a first build's name
    profiled: str  # how profile profiles
    found: str  # what profile finds
    kernel: str  # profile's `kernel` parameter


_GPU = Words(
    kernels="usually compiling CUDA with load_inline",
    hardware="the hardware with its measured peaks and the floor they set",
    build="a first CUDA build",
    profiled="under Nsight Compute, or the torch profiler where ncu cannot run",
    found="the kernels that take the time, with their occupancy, memory and compute throughput, and plain "
          "findings on what limits them",
    kernel="Only kernels whose name matches this regular expression.")
_CPU = Words(
    kernels="compiling C++ for the CPU with load_inline",
    hardware="the hardware: its cores and caches, and its measured peaks and the floor they set where the problem "
             "declares its bytes",
    build="a first C++ build",
    profiled="under the torch profiler",
    found="the ops that take the time, your extension's calls among them, each by its self time (its own, "
          "less the ops it called); and perf's samples of a second or two of calls, where perf may sample: the "
          "share in your extension, libtorch and Python, and the functions that take it",
    kernel="Not used on a CPU: the torch profiler lists every op.")


def words(cpu: bool) -> Words:
    return _CPU if cpu else _GPU


def instructions(cpu: bool) -> str:
    return (f"The harness judges custom kernels (a Python file defining `ModelNew`, {words(cpu).kernels}) against "
            "a PyTorch reference `Model` in a problem file: it builds the candidate, checks it against the reference "
            "on fresh inputs, and times both with a 95% interval, in processes of their own. A session: "
            "describe_problem for the rules, inputs and the reference's time; start_run for a run id; write a "
            "candidate and evaluate it with that run id; read the verdict and the advice; repeat until a result says "
            "you can stop. history, best and show_round read runs back.")


def descriptions(cpu: bool) -> dict[str, str]:
    """Each tool's description, by the tool's name."""
    said = words(cpu)
    return {
        "describe_problem": "The problem as a candidate must meet it: the rules it must keep, the inputs forward "
                            "receives (shapes, dtypes), the tolerance its outputs must match, the reference's own "
                            f"time on each clock, {said.hardware}. Read this before writing a candidate; it takes "
                            "seconds the first time (the reference is loaded and timed), none after.",
        "start_run": "Start a run: a record under runs/ of every candidate you evaluate with its id, as rounds, which "
                     "people read back with `harness show` and `harness report`. Each result then says where the run "
                     "stands against `accept` and `target`, and when you can stop.",
        "evaluate": "Build, check and time a candidate against the problem's reference, as `harness eval` does: the "
                    "verdict (correct, incorrect, compile_error, rejected, ...), the speedup with its 95% interval "
                    "and how it was timed, the first compiler errors or the mismatch, the times, warnings and advice; "
                    "with `run`, the rounds so far and where the run stands. A file that does not parse is refused "
                    f"before anything builds. Takes from seconds (a cached build) to minutes ({said.build}); "
                    "progress is reported as it goes.",
        "profile": "One forward of a candidate (or, with neither source nor path, of the reference) "
                   f"{said.profiled}: {said.found}.",
        "history": "A run's rounds: each one's verdict, speedup and times, and where the run stands.",
        "best": "A run's best correct candidate (by its speedup interval's lower end): its round, its speedup, and "
                "its whole source.",
        "show_round": "One round of a run: the feedback it got, as evaluate gave it, and its candidate's source.",
    }


def refused_arguments(tool: str, errors: list[dict[str, Any]]) -> str:
    """Arguments `tool`'s schema refused, in one sentence: each with what is wrong and the value given
    (pydantic's ValidationError.errors()), without pydantic's lines and links."""
    said = []
    for error in errors:
        given = error.get("input")
        shown = f" (given {given!r})" if error.get("type") != "missing" and isinstance(
            given, (int, float, str, bool, type(None))) and len(repr(given)) <= 80 else ""
        said.append(f"`{'.'.join(str(part) for part in error['loc'])}`: {error['msg']}{shown}")
    return f"{tool} refused its arguments: {'; '.join(said)}."
