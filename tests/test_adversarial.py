"""Candidates that try to fake a pass or a speedup (tests/adversarial/), against the real engine.

Each case file's header (harness/sweep/corpus.py) names the invariant it tests, the problem it runs on,
the devices where its attack exists and the verdict and sentence it must get: every case is judged here
by its header, so a case file added with one is tested as it lands.
"""
import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from rich.console import Console

from conftest import HERE, PROBLEMS
from harness import EvalOptions, Verdict, evaluate, evaluate_batch
from harness.cli.sweep import corpus_end
from harness.sweep.jobs import Job, corpus_cases, corpus_jobs
from harness.sweep.records import record_of
from harness.degenerate import Kind

ADVERSARIAL = HERE / "adversarial"
SMALL = PROBLEMS / "small_layernorm.py"

CPU_JOBS = corpus_jobs(ADVERSARIAL, "cpu")
# Under --policy strict, read from the source: refused unrun, on any device, so judged on the CPU only
STRICT = [job for job in CPU_JOBS if job.expect.strict]
# Under the audit (every check at its strictest): what it catches that the fast verdict lets through
AUDITED = [job for job in CPU_JOBS if job.expect.audit]
BACKWARD = [job for job in CPU_JOBS if job.case.backward and not job.expect.strict and not job.expect.audit]
# Wrong one call in 20: judged under a short timing, where only the floor of checked calls meets it
FAULTY = "wrong_every_20th"
FORWARD = [job for job in CPU_JOBS if not (job.expect.strict or job.expect.audit or job.case.backward)
           and job.label != FAULTY]
# These made the harness raise once: each gets an evaluator of its own, so that an exception takes no other
# case's result with it.
ALONE = {"forged_zero_time", "alters_trial_inputs"}
GPU_JOBS = [job for job in corpus_jobs(ADVERSARIAL, "cuda") if not job.expect.strict]


def timing_bound(job: Job) -> bool:
    """Expected `correct`: caught, or let through, by comparing the reference's time beside the candidate
    with its time alone (or a warning on a correct result)."""
    return all(outcome.verdict is Verdict.CORRECT for outcome in job.expect.outcomes)


def params(jobs: list[Job]) -> list:
    return [pytest.param(job, id=job.label) for job in jobs]


def assert_expected(result, job: Job) -> None:
    if isinstance(result, BaseException):
        raise result
    assert job.expect.met(result), (f"{job.label}: expected {job.expect}; got {result.verdict.value} "
                                    f"({result.speedup}): {result.explanation} {result.warnings}")


def evaluate_all(jobs: list[Job], options: EvalOptions, lanes: int, alone: list[Job] = ()) -> dict:
    """Evaluate jobs in `lanes` evaluators side by side, each with its own reference process (a fresh
    worker per candidate is the cost to spread), and each `alone` job in an evaluator of its own; an
    exception that one raises stands in for its result. By label."""
    def lane(part: list[Job]) -> dict:
        by_problem: dict = {}
        for job in part:
            by_problem.setdefault(job.problem, []).append(job)
        return {job.label: result for problem, group in by_problem.items() for job, result in
                zip(group, evaluate_batch(problem, [job.candidate for job in group], options))}

    with ThreadPoolExecutor(lanes + len(alone)) as pool:
        single = {job.label: pool.submit(evaluate, job.problem, job.candidate, options) for job in alone}
        results = {label: result for part in pool.map(lane, [jobs[i::lanes] for i in range(lanes)])
                   for label, result in part.items()}
        return results | {label: future.exception() or future.result() for label, future in single.items()}


@pytest.fixture(scope="module")
def hog_dir(tmp_path_factory):
    """Where detached_hog's processes write their pids (its evaluations see the variable)."""
    path = tmp_path_factory.mktemp("hogs")
    os.environ["HARNESS_TEST_HOG_DIR"] = str(path)
    yield path
    os.environ.pop("HARNESS_TEST_HOG_DIR", None)


@pytest.fixture(scope="module")
def cpu_results(cpu_options, hog_dir):
    options = dataclasses.replace(cpu_options, time_cap=0.3)
    rest = [job for job in FORWARD if not timing_bound(job)]
    results = evaluate_all([job for job in rest if job.label not in ALONE], options, lanes=3,
                           alone=[job for job in rest if job.label in ALONE])
    # Verdicts that rest on the reference's time beside a candidate against alone run after the
    # rest, one at a time: with lanes side by side on a small machine the two come from different loads.
    for job in FORWARD:
        if timing_bound(job):
            results[job.label] = evaluate(job.problem, job.candidate, options)
    return results


@pytest.mark.parametrize("job", params(FORWARD))
def test_attempt_gets_the_verdict_its_header_names(cpu_results, job):
    """Caught with the verdict and the sentence that name its trick; or, out of its reach (a hook on every
    module, a kept input given a slower class, a spinning process left behind, a cache on fresh inputs),
    correct and no faster than the honest kernel it wraps."""
    assert_expected(cpu_results[job.label], job)


def test_a_detached_process_ends_with_its_evaluation(cpu_results, hog_dir):
    """detached_hog and escapes_subreaper double-fork a spinning process into a session of its own (the
    second after turning off its worker's adoption of orphans): each is gone once its evaluation is."""
    pids = [int(p.read_text()) for p in hog_dir.glob("*.pid")]
    assert pids, "the candidate started no process"
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "ZX":
                    alive.append(pid)
        except OSError:
            pass
    assert not alive, f"still running: {alive}"


@pytest.fixture(scope="module")
def faulty_result(cpu_options):
    options = dataclasses.replace(cpu_options, time_cap=0.05, min_samples=10, trials=2)
    job = next(job for job in CPU_JOBS if job.label == FAULTY)
    return evaluate(job.problem, job.candidate, options)


def test_a_fault_of_one_call_in_twenty_is_met_however_short_the_timing(faulty_result):
    """A timing that stops after 10 calls still compares at least FAST.checked_calls timed outputs: the
    20th call, wrong, is among them."""
    from harness.engine.scrutiny import FAST

    assert_expected(faulty_result, next(job for job in CPU_JOBS if job.label == FAULTY))
    assert faulty_result.timed_calls_checked >= FAST.checked_calls


def test_a_timed_failure_says_what_was_seen_and_names_no_stream_it_did_not_measure(cpu_results):
    """Call counting shows as wrong timed outputs, with no work off the caller's stream."""
    said = cpu_results["counts_calls"].explanation
    assert "while being timed" in said and "No work was seen off the caller's stream" in said, said
    assert "another stream" not in said


@pytest.fixture(scope="module")
def backward_results(cpu_options):
    options = dataclasses.replace(cpu_options, time_cap=0.3, backward=True)
    problem, = {job.problem for job in BACKWARD}
    return {job.label: result for job, result in
            zip(BACKWARD, evaluate_batch(problem, [job.candidate for job in BACKWARD], options))}


@pytest.mark.parametrize("job", params(BACKWARD))
def test_backward_attempt_gets_the_verdict_its_header_names(backward_results, job):
    """Under --backward the gradients are checked and re-checked as outputs are."""
    assert_expected(backward_results[job.label], job)


@pytest.fixture(scope="module")
def strict_results(cpu_options):
    options = dataclasses.replace(cpu_options, policy="strict")
    return {job.label: evaluate(job.problem, job.candidate, options) for job in STRICT}


@pytest.mark.parametrize("job", params(STRICT))
def test_strict_policy_rejects_before_building(strict_results, job):
    result = strict_results[job.label]
    assert_expected(result, job)
    assert result.build is None  # refused on its source: nothing was imported or compiled


@pytest.fixture(scope="module")
def audit_results(cpu_options):
    options = dataclasses.replace(cpu_options, time_cap=0.3).audited()
    return {job.label: evaluate(job.problem, job.candidate, options) for job in AUDITED}


@pytest.mark.parametrize("job", params(AUDITED))
def test_the_audit_catches_what_its_header_names(audit_results, job):
    """Under the audit: caught by a check the fast verdict does not make (test_audit.py shows the fast
    verdict passing them)."""
    assert_expected(audit_results[job.label], job)


def test_the_corpus_sweep_finds_every_cpu_case_caught(cpu_results, faulty_result, backward_results,
                                                       strict_results, audit_results, tmp_path):
    """The evaluations above, as the corpus sweep (harness sweep --adversarial) records and tallies them:
    every CPU case caught, a row an invariant in the printed table and in summary.json."""
    results = cpu_results | backward_results | strict_results | audit_results | {FAULTY: faulty_result}
    records = [record_of(job, results[job.label]) for job in CPU_JOBS]
    assert all(r.invariant == job.case.invariant and r.expected for r, job in zip(records, CPU_JOBS))
    console = Console(record=True, width=200)
    assert corpus_end(records, tmp_path, tmp_path / "results.jsonl", console) == 0
    printed = console.export_text()
    invariants = {job.case.invariant for job in CPU_JOBS}
    rows = {line.split("│")[1].strip(): line for line in printed.splitlines() if line.count("│") > 2}
    assert invariants | {"all"} <= set(rows), printed
    assert f"│ {len(CPU_JOBS)} │ 0 │" in " ".join(rows["all"].split()), printed
    assert f"Every case was caught ({len(CPU_JOBS)})" in printed
    summary = json.loads((tmp_path / "summary.json").read_text())["invariants"]
    assert {t["invariant"] for t in summary} == invariants and not any(t["missed"] for t in summary)
    assert sorted(label for t in summary for label in t["caught"]) == sorted(job.label for job in CPU_JOBS)


def test_constant_output_on_a_degenerate_problem_is_flagged_at_load(cpu_results):
    """A constant is this problem's right answer (correct, by its header), so the problem itself is flagged."""
    result = next(r for r in cpu_results.values() if r.candidate.endswith("constant_output.py"))
    assert [d.kind for d in result.problem_degenerate] == [Kind.CONSTANT]


HONEST_GPU = ["two_streams_joined", "graph_wrapper", "autograd_function", "waited_side_stream", "host_busy"]


@pytest.fixture(scope="module")
def gpu_results(cache_dir):
    options = EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=2.0)
    results = evaluate_all([job for job in GPU_JOBS if not job.expect.audit], options, lanes=1)
    results |= {job.label: evaluate(job.problem, job.candidate, options.audited())
                for job in GPU_JOBS if job.expect.audit}
    controls = evaluate_batch(SMALL, [HERE / "candidates" / f"{name}.py" for name in HONEST_GPU], options)
    return results | dict(zip(HONEST_GPU, controls))


@pytest.mark.gpu
@pytest.mark.parametrize("job", params(GPU_JOBS))
def test_gpu_attempt_gets_the_verdict_its_header_names(gpu_results, job):
    """The synchronize and Event patches matter to the GPU timer only; outputs travel as CUDA IPC handles."""
    assert_expected(gpu_results[job.label], job)


@pytest.mark.gpu
@pytest.mark.parametrize("name", HONEST_GPU)
def test_honest_kernels_that_use_streams_graphs_and_the_host_stay_correct(gpu_results, name):
    """Two streams forked and joined with events, a CUDA graph fed fresh inputs on the caller's stream, a
    host-bound autograd Function, a waited side stream, a busy host: honest, so `correct`, whatever the
    probes and the trace make of them."""
    result = gpu_results[name]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.hidden_work_ms is None and result.clock == "gpu", result.warnings


def test_every_case_has_a_header_and_says_its_trick():
    """Every file is read (its header: corpus_cases raises on a bad one) and judged on some device."""
    cases = corpus_cases(ADVERSARIAL)
    assert sorted(path.stem for path, _ in cases) == sorted({job.case.name for job in CPU_JOBS + GPU_JOBS})
    for path, _ in cases:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# ") and len(first) > 30, f"{path.name}: the first line must say its trick"


def test_timed_calls_get_each_seeds_inputs_in_the_same_tensors():
    """What keeps an address- or id-keyed output cache from passing: the same tensor objects, at the
    same addresses, carry each seed's inputs in turn."""
    import torch

    from harness.engine.workers.common import SameTensors, import_file, inputs_from_seed

    problem = import_file(str(SMALL), "problem_same_tensors")
    draw = SameTensors(problem, torch.device("cpu"))
    first = draw(1)
    address = [t.data_ptr() for t in first]
    second = draw(2)
    assert second[0] is first[0] and [t.data_ptr() for t in second] == address
    assert torch.equal(second[0], inputs_from_seed(problem, torch.device("cpu"), 2)[0])
    assert not torch.equal(second[0], inputs_from_seed(problem, torch.device("cpu"), 1)[0])
