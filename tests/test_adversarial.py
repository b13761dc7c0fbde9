"""Candidates that try to fake a pass or a speedup (tests/adversarial/), against the real engine.

Each attempt must end in a verdict other than `correct`, with an explanation that
names the trick. An attempt whose defence is not wired into the engine yet is
marked xfail with that defence as its reason: remove the mark when it lands.
"""
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from conftest import HERE, PROBLEMS, REPO
from harness import EvalOptions, Verdict, evaluate, evaluate_batch

ADVERSARIAL = HERE / "adversarial"
SMALL = PROBLEMS / "small_layernorm.py"
LAYERNORM = REPO / "problems" / "layernorm_4d.py"


@dataclass(frozen=True)
class Attempt:
    name: str
    says: tuple[str, ...]  # the explanation names the trick with one of these


def attempt(name: str, *says: str) -> Attempt:
    return Attempt(name, says)



CPU = [
    attempt("reuses_freed_memory", "differs from the reference"),
    attempt("mutates_input_for_reference", "changed its input"),
    # the timed calls get their inputs in the same tensors (SameTensors), so the re-check catches these
    # whatever the allocator does; a trial may catch them first
    attempt("cache_by_data_ptr", "while being timed", "differs from the reference"),
    attempt("cache_by_id", "while being timed", "differs from the reference"),
    attempt("counts_calls", "while being timed"),
    # the worker now draws trial inputs from a seed too, so the seed no longer tells timing from trials
    attempt("seed_detects_timing", "while being timed", "differs from the reference"),
    attempt("stack_detects_timing", "while being timed"),
    attempt("background_thread", "background thread"),
    # caught as a running thread, or by its unfinished output when the thread is between jobs
    attempt("background_pool", "background thread", "differs from the reference"),
    attempt("lazy_tensor_subclass", "Tensor subclass"),
    attempt("torch_function_mode", "torch function or dispatch mode"),
    attempt("non_tensor_output", "expected a plain torch.Tensor"),
    attempt("patch_perf_counter", "replaced time.perf_counter"),
    attempt("patch_allclose", "replaced torch.allclose"),
    attempt("patch_time_interleaved", "replaced harness.timing.time_interleaved"),
    attempt("patch_channel_send", "replaced harness.channel.send"),
    attempt("patch_timing_clock", "replaced harness.timing._perf_counter"),
    attempt("patch_torch_equal", "replaced torch.equal"),
    attempt("patch_compare", "replaced harness.compare.compare"),
    attempt("slows_reference", "replaced torch.nn.functional.layer_norm"),
    attempt("inflates_reference_inputs", "replaced torch.randn"),
    attempt("slows_reference_dispatcher", "slowed the reference down"),
    attempt("forged_stdout_exit", "exited with status 0"),
    attempt("forged_channel_reply", "forged"),
    attempt("gc_finds_reference_output", "differs from the reference"),
    attempt("regenerates_inputs_from_seed", "differs from the reference"),
    attempt("lower_precision", "differs from the reference"),
    attempt("lower_precision_output", "dtype torch.float16"),
    attempt("enables_tf32", "lowered float32 precision"),
    attempt("enables_tf32_legacy", "lowered float32 precision"),
    attempt("assumes_default_params", "differs from the reference"),
    attempt("snapshots_params_at_init", "differs from the reference"),
    attempt("changes_outputs_after_return", "changed after it returned"),
]

GPU = [  # problems/layernorm_4d.py; the synchronize and Event patches matter to the GPU timer only
    attempt("reuses_freed_memory", "differs from the reference"),
    attempt("below_floor", "differs from the reference"),
    attempt("graph_replay", "differs from the reference", "while being timed"),
    attempt("l2_persistence", "left persisting L2 set"),
    attempt("patch_synchronize", "replaced torch.cuda.synchronize"),
    attempt("patch_cuda_event", "replaced torch.cuda.Event"),
    # its outputs travel as CUDA IPC handles, then (the trial again) through host memory
    attempt("changes_outputs_after_return", "changed after it returned"),
]

# Under --backward (tests/problems/rmsnorm_train_small.py): the gradients are checked and re-checked as outputs are.
BACKWARD = [
    attempt("backward_caches_grads", "while being timed"),
    attempt("backward_mutates_grad_output", "changed the upstream gradient"),
]
RMSNORM_TRAIN = PROBLEMS / "rmsnorm_train_small.py"

# Read from the source: the default policy lets them run with a warning, the strict one refuses them unrun.
STATIC = [
    ("calls_reference_op", "calls the reference op itself"),
    ("compiles_reference", "hands the work to a compiler"),
    ("try_except_fallback", "falls back to torch"),
    ("forged_channel_reply", "reaches into the harness"),
]
NEUTRALISED = ["cache_by_content", "side_stream"]  # fresh inputs leave the first nothing to gain; the second has its own test
DEGENERATE = "constant_output"  # right on a degenerate problem: the problem lint must flag the problem
# caught, or let through, by comparing the reference's time beside the candidate with its time alone
TIMING_BOUND = [(SMALL, "slows_reference_dispatcher"), (SMALL, "cache_by_content"), (SMALL, "calls_reference_op"),
                (PROBLEMS / "degenerate_softmax.py", DEGENERATE)]
# These make the harness raise today: each gets an evaluator of its own, so that its exception takes no other
# attempt's result with it.
ALONE = [
    attempt("forged_zero_time", "forged"),
    attempt("alters_trial_inputs", "changed how inputs are drawn"),
]


def params(attempts: list[Attempt]) -> list:
    return [pytest.param(a, id=a.name) for a in attempts]


def assert_caught(result, attempt: Attempt) -> None:
    if isinstance(result, BaseException):
        raise result
    assert result.verdict is not Verdict.CORRECT, result.explanation
    assert any(says in result.explanation for says in attempt.says), result.explanation


def evaluate_all(jobs: list[tuple], options: EvalOptions, lanes: int, alone: list[tuple] = ()) -> dict:
    """Evaluate (problem, attempt name) jobs in `lanes` evaluators side by side, each with its own
    reference process (a fresh worker per candidate is the cost to spread), and each `alone` job in
    an evaluator of its own; an exception that one raises stands in for its result."""
    def lane(part: list[tuple]) -> dict:
        by_problem: dict = {}
        for problem, name in part:
            by_problem.setdefault(problem, []).append(name)
        return {name: result for problem, names in by_problem.items() for name, result in
                zip(names, evaluate_batch(problem, [ADVERSARIAL / f"{n}.py" for n in names], options))}

    with ThreadPoolExecutor(lanes + len(alone)) as pool:
        single = {name: pool.submit(evaluate, problem, ADVERSARIAL / f"{name}.py", options) for problem, name in alone}
        results = {name: result for part in pool.map(lane, [jobs[i::lanes] for i in range(lanes)])
                   for name, result in part.items()}
        return results | {name: future.exception() or future.result() for name, future in single.items()}


@pytest.fixture(scope="module")
def cpu_results(cpu_options):
    options = dataclasses.replace(cpu_options, time_cap=0.3)
    timing_bound = {name for _, name in TIMING_BOUND}
    results = evaluate_all([(SMALL, a.name) for a in CPU if a.name not in timing_bound], options, lanes=3,
                           alone=[(SMALL, a.name) for a in ALONE])
    # Verdicts that rest on the reference's time beside a candidate against alone run after the
    # rest, one at a time: with lanes side by side on a small machine the two come from different loads.
    for problem, name in TIMING_BOUND:
        results[name] = evaluate(problem, ADVERSARIAL / f"{name}.py", options)
    return results


@pytest.mark.parametrize("attempt", params(CPU))
def test_attempt_fails_and_names_the_trick(cpu_results, attempt):
    assert_caught(cpu_results[attempt.name], attempt)


def test_slowdown_is_refused_only_after_it_repeats(cpu_results):
    """The first slowdown past the threshold triggers more timings; the refusal needs every one."""
    result = cpu_results["slows_reference_dispatcher"]
    assert result.verdict is Verdict.REJECTED, result.explanation
    first = result.retimed_for_slowdown
    assert first.beside_ms > 1.5 * first.alone_ms


def test_a_timed_failure_says_what_was_seen_and_names_no_stream_it_did_not_measure(cpu_results):
    """Call counting shows as wrong timed outputs, with no work off the caller's stream."""
    said = cpu_results["counts_calls"].explanation
    assert "while being timed" in said and "No work was seen off the caller's stream" in said, said
    assert "another stream" not in said


def test_content_cache_gains_nothing_on_fresh_inputs(cpu_results):
    result = cpu_results["cache_by_content"]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.speedup < 1.5  # every timed call misses the cache and does the work


def test_warn_policy_shows_the_static_report(cpu_results):
    result = cpu_results["calls_reference_op"]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert any("calls the reference op itself" in w for w in result.warnings), result.warnings


@pytest.fixture(scope="module")
def backward_results(cpu_options):
    options = dataclasses.replace(cpu_options, time_cap=0.3, backward=True)
    names = [a.name for a in BACKWARD]
    return dict(zip(names, evaluate_batch(RMSNORM_TRAIN, [ADVERSARIAL / f"{n}.py" for n in names], options)))


@pytest.mark.parametrize("attempt", params(BACKWARD))
def test_backward_attempt_fails_and_names_the_trick(backward_results, attempt):
    assert_caught(backward_results[attempt.name], attempt)


@pytest.mark.parametrize("name, says", STATIC)
def test_strict_policy_rejects_before_building(cpu_options, name, says):
    result = evaluate(SMALL, ADVERSARIAL / f"{name}.py", dataclasses.replace(cpu_options, policy="strict"))
    assert result.verdict is Verdict.REJECTED, result.explanation
    assert says in result.explanation
    assert result.build is None  # refused on its source: nothing was imported or compiled


def test_constant_output_on_a_degenerate_problem_is_flagged(cpu_results):
    result = cpu_results[DEGENERATE]
    assert result.verdict is Verdict.CORRECT, result.explanation  # a constant is this problem's right answer...
    assert any("the same value everywhere" in w for w in result.warnings), result.warnings  # ...so say so


@pytest.mark.parametrize("attempt", params(ALONE))
def test_attempt_ends_in_a_verdict_not_an_exception(cpu_results, attempt):
    assert_caught(cpu_results[attempt.name], attempt)


@pytest.fixture(scope="module")
def gpu_results(cache_dir):
    jobs = [(LAYERNORM, name) for name in [a.name for a in GPU] + ["side_stream"]]
    return evaluate_all(jobs, EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=2.0), lanes=1)


@pytest.mark.gpu
@pytest.mark.parametrize("attempt", params(GPU))
def test_gpu_attempt_fails_and_names_the_trick(gpu_results, attempt):
    assert_caught(gpu_results[attempt.name], attempt)


@pytest.mark.gpu
def test_side_stream_work_is_timed(gpu_results):
    """Work left on a side stream finishes after the caller's stream (the latency clock's tail), a
    per-stream trace names the stream, and its outputs, read on the caller's stream before they are
    written, fail the re-check of the timed calls."""
    result = gpu_results["side_stream"]
    assert result.hidden_work_ms and result.hidden_work_ms > 1.0, result.explanation
    assert result.hidden_streams and result.clock == "all_streams", result.warnings
    assert result.verdict is Verdict.INCORRECT, result.explanation
    assert "another stream" in result.explanation


def test_every_attempt_is_tested_and_says_its_trick():
    files = {path.stem: path for path in ADVERSARIAL.glob("*.py")}
    tested = ({a.name for a in CPU + GPU + BACKWARD} | {name for name, _ in STATIC} | set(NEUTRALISED) | {DEGENERATE}
              | {a.name for a in ALONE})
    assert sorted(files) == sorted(tested)
    for path in files.values():
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


def test_the_candidate_and_the_reference_are_timed_on_the_same_input_tensors():
    """Inputs at addresses of each model's own would be a placement no twin varies: one draw
    serves every forward entry, the candidate's and the reference's alike."""
    import torch

    from harness.engine.workers.candidate import _forward_entries
    from harness.engine.workers.common import import_file
    from harness.integrity.recheck import TimedOutputs

    problem = import_file(str(SMALL), "problem_shared_inputs")
    cpu = torch.device("cpu")
    entries = _forward_entries(problem, cpu, torch.nn.Identity(), torch.nn.Identity(), TimedOutputs(cpu),
                               TimedOutputs(cpu), default_numerics=True)
    candidate = entries["candidate"].make_args(1)
    for name in ("reference", "reference_defaults"):
        assert [t.data_ptr() for t in entries[name].make_args(2)] == [t.data_ptr() for t in candidate], name
