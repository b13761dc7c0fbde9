"""Several candidates at once: parallel builds, one timing slot per device."""
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import CANDIDATES, PROBLEMS
from harness import Evaluator, Verdict, evaluate_batch
from harness.engine.processes.cores import Cores

SMALL = PROBLEMS / "small_layernorm.py"


def cpp_variant(tmp_path, name: str):
    """A different source (so a different cache entry) with the same behaviour and build flags (other flags
    would make torch's precompiled header again)."""
    source = (CANDIDATES / "cpp_layernorm.py").read_text()
    path = tmp_path / f"{name}.py"
    path.write_text(source.replace("cpp_layernorm_test", f"cpp_layernorm_{name}"))
    return path


def test_pool_builds_in_parallel_and_keeps_results_apart(tmp_path, cpu_options):
    a = cpp_variant(tmp_path, "variant_a")
    a_again = tmp_path / "variant_a_again.py"
    shutil.copy(a, a_again)  # same source, built concurrently with the first
    b = CANDIDATES / "cpp_layernorm.py"  # another source: another entry (the session's, built once for every file)
    candidates = [a, CANDIDATES / "segfault.py", a_again, b, CANDIDATES / "py_wrong.py",
                  CANDIDATES / "py_correct.py"]
    events = []
    results = evaluate_batch(SMALL, candidates, cpu_options, build_jobs=3,
                            on_event=lambda i, phase: events.append((i, phase)))
    assert [r.candidate for r in results] == [str(c) for c in candidates]
    verdicts = [r.verdict for r in results]
    assert verdicts == [Verdict.CORRECT, Verdict.CRASHED, Verdict.CORRECT, Verdict.CORRECT,
                        Verdict.INCORRECT, Verdict.CORRECT], [r.explanation for r in results]
    assert results[0].build.key == results[2].build.key != results[3].build.key
    assert all(r.build.ok for r in (results[0], results[2], results[3]))
    # every candidate went through building before its verdict
    for i in range(len(candidates)):
        phases = [p for j, p in events if j == i]
        assert phases[0] == "building" and phases[-1] == verdicts[i].value


def test_the_next_candidate_imports_in_the_worker_staged_for_it(cpu_options):
    """run(a, upcoming=b) starts b's worker; run(b) then uses that worker, not a new one."""
    with Evaluator(SMALL, cpu_options) as evaluator:
        first, second = (evaluator.build(CANDIDATES / name) for name in ("py_correct.py", "py_wrong.py"))
        assert evaluator.run(first, upcoming=second).verdict is Verdict.CORRECT
        staged_log = second.result.worker_log  # written when its worker was given the candidate
        assert evaluator.run(second).verdict is Verdict.INCORRECT
        assert second.result.worker_log == staged_log


def test_a_timing_stops_the_worker_another_problem_staged_on_its_device(cpu_options):
    """A sweep stages the next problem's first candidate while the current problem is checked: the
    current problem's timing stops that worker (SIGSTOP) while it runs, as it does its own staged one."""
    from harness.results import EvalResult

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def stops(pid: int) -> bool:
        """Stopped, once the SIGSTOP sent is taken (it is delivered, not waited for)."""
        ends = time.monotonic() + 10
        while state(pid) != "T" and time.monotonic() < ends:
            time.sleep(0.01)
        return state(pid) == "T"

    with Evaluator(SMALL, cpu_options) as current, Evaluator(SMALL, cpu_options) as upcoming:
        upcoming.children.stage(upcoming.build(CANDIDATES / "py_correct.py"))
        staged = upcoming.children._staged[1]
        with current.children.holding_device("timing", lambda doing: None, EvalResult(Verdict.CORRECT, "")):
            assert stops(staged.proc.pid)
        assert state(staged.proc.pid) != "T" and staged.alive()
        upcoming.children.worker_for(upcoming.children._staged[0])  # no longer staged: not stopped again
        with current.children.holding_device("timing", lambda doing: None, EvalResult(Verdict.CORRECT, "")):
            assert state(staged.proc.pid) != "T"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a spare's cores and the timing ones apart need two")
def test_a_staged_worker_imports_on_the_spare_cores_and_takes_the_timing_ones_at_its_first_request(cpu_options):
    """The evaluation in progress uses the timing cores: a worker staged beside it imports and builds on the
    spare's (the build cores on a GPU host), and runs the candidate's requests on the timing ones."""
    first, last = sorted(os.sched_getaffinity(0))[0], sorted(os.sched_getaffinity(0))[-1]

    def cores(pid: int) -> str:
        status = Path(f"/proc/{pid}/status").read_text()
        return status.split("Cpus_allowed_list:")[1].split()[0]

    seen = {}
    with Evaluator(SMALL, cpu_options) as evaluator:
        children = evaluator.children
        children.cores = Cores(timing=(last,), build=(first,))  # as split_cores splits a GPU host's
        evaluator.spawn()
        built = evaluator.build(CANDIDATES / "py_correct.py")
        children.stage(built)
        staged = children._staged[1]

        def on_phase(doing: str) -> None:
            if doing in ("checking", "timing"):
                seen[doing] = cores(staged.proc.pid)

        assert evaluator.run(built, on_phase).verdict is Verdict.CORRECT
    # ready (its import and models made) when the check began, no request yet; timed on the timing core
    assert seen == {"checking": str(first), "timing": str(last)}


def test_a_spawned_evaluator_loads_the_problem_only_when_started(cpu_options):
    """spawn() starts a reference process without the problem (a sweep's next problem, waiting
    for GPU memory); start_reference then tells that very process the problem."""
    with Evaluator(SMALL, cpu_options) as evaluator:
        evaluator.spawn()
        blank = evaluator.children._blank_reference
        assert evaluator.reference is None and blank.alive() and not evaluator.reference_info.ready
        evaluator.start_reference()
        assert evaluator.reference is blank and evaluator.reference_info.ready
        assert evaluator.evaluate(CANDIDATES / "py_correct.py").verdict is Verdict.CORRECT


def test_the_reference_alone_is_timed_once_and_shared_by_the_next_candidates(cpu_options, reference_starts):
    """Each later candidate's result says how old the shared figures were; a fresh Evaluator times anew."""
    with Evaluator(SMALL, cpu_options) as evaluator:
        first, second = (evaluator.evaluate(CANDIDATES / "py_correct.py") for _ in range(2))
        assert first.verdict is second.verdict is Verdict.CORRECT
        assert "reference_alone_age_s" not in first.details
        assert 0 <= second.details["reference_alone_age_s"] <= second.seconds + first.seconds
        if "retimed_for_gap" not in second.details:  # the same figures, unless load had them timed afresh
            assert second.reference_alone_ms == first.reference_alone_ms
        assert reference_starts == [SMALL.stem]
