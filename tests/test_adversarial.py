"""Candidates that try to fake a pass or a speedup (tests/adversarial/), against the real engine.

Each attempt must end in a verdict other than `correct`, with an explanation that
names the trick. An attempt whose defence is not wired into the engine yet is
marked xfail with that defence as its reason: remove the mark when it lands.
"""
import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from conftest import HERE, PROBLEMS, REPO
from harness import EvalOptions, Verdict, evaluate, evaluate_batch
from harness.degenerate import Kind

ADVERSARIAL = HERE / "adversarial"
SMALL = PROBLEMS / "small_layernorm.py"
MATMUL_MEAN = PROBLEMS / "matmul_mean.py"
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
    # (or, handing back an output it returned before, that the caller still holds)
    attempt("cache_by_data_ptr", "while being timed", "differs from the reference",
            "in the memory of an earlier call's outputs"),
    attempt("cache_by_id", "while being timed", "differs from the reference",
            "in the memory of an earlier call's outputs"),
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
    attempt("slows_reference_dispatcher", "registered kernels of its own for operators torch already had"),
    # the judge's own draws are out of its reach: namespaces the harness calls swapped, the seeds not its own
    attempt("replaces_random_seed", "replaced random.seed"),
    attempt("replaces_urandom", "replaced os.urandom"),
    attempt("reuses_output", "in the memory of an earlier call's outputs"),
    attempt("escapes_subreaper", "turned off its process's adoption of the processes it starts"),
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

# On tests/problems/matmul_mean.py: within float32's tolerance, far from float64 (integrity/precision.py)
PRECISION_CPU = [attempt("bf16_gemm_mean", "further from the reference computed in float64")]
PRECISION_GPU = PRECISION_CPU + [attempt("half_addmm_mean", "further from the reference computed in float64"),
                                 attempt("triton_tf32_dot", "further from the reference computed in float64")]
# Out of reach since the reference is timed in a process of its own, the candidate's stopped meanwhile: correct,
# and no faster than the honest kernel they wrap (F.layer_norm, the reference's own op: about 1x), where with
# the reference beside it in its process each read several times that.
REACH = [(SMALL, "global_pre_hook"), (SMALL, "swaps_input_class"), (SMALL, "detached_hog")]
# a misaligned input slows a GPU's vectorized LayerNorm; on this small CPU problem it moves nothing
REACH_GPU = [(SMALL, "global_pre_hook"), (SMALL, "misaligned_input")]
# PyTorch's stream order (integrity/stream_order.py), on tests/problems/small_layernorm.py
STREAM_ORDER = [
    attempt("side_stream_unwaited", "does not wait for the caller's stream"),
    attempt("side_stream_in_spin", "does not wait for the caller's stream"),
    # waits, never joined: its outputs are read on the caller's stream before they are written, or the trace
    # sees its work after the window
    attempt("side_stream", "not ready on the caller's stream", "does not wait for the caller's stream",
            "outside their timed windows"),
    attempt("hides_tail", "outside their timed windows"),
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
NEUTRALISED = ["cache_by_content"]  # fresh inputs leave it nothing to gain
# Wrong one call in 20: met by the floor of checked calls (stages.CHECKED_CALLS) where a short timing takes few
FAULTY = "wrong_every_20th"
DEGENERATE = "constant_output"  # right on a degenerate problem: the problem lint must flag the problem
# caught, or let through, by comparing the reference's time beside the candidate with its time alone
TIMING_BOUND = [(SMALL, "cache_by_content"), (SMALL, "calls_reference_op"),
                (PROBLEMS / "degenerate_softmax.py", DEGENERATE)] + REACH
# These make the harness raise today: each gets an evaluator of its own, so that its exception takes no other
# attempt's result with it.
ALONE = [
    attempt("forged_zero_time", "forged"),
    # its own kernel for the random draw the harness makes inputs with: seen as it is registered
    attempt("alters_trial_inputs", "changed how inputs are drawn", "registered kernels of its own"),
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
def hog_dir(tmp_path_factory):
    """Where detached_hog's processes write their pids (its evaluations see the variable)."""
    path = tmp_path_factory.mktemp("hogs")
    os.environ["HARNESS_TEST_HOG_DIR"] = str(path)
    yield path
    os.environ.pop("HARNESS_TEST_HOG_DIR", None)


@pytest.fixture(scope="module")
def cpu_results(cpu_options, hog_dir):
    options = dataclasses.replace(cpu_options, time_cap=0.3)
    timing_bound = {name for _, name in TIMING_BOUND}
    jobs = [(SMALL, a.name) for a in CPU if a.name not in timing_bound] + [(MATMUL_MEAN, a.name)
                                                                            for a in PRECISION_CPU]
    results = evaluate_all(jobs, options, lanes=3, alone=[(SMALL, a.name) for a in ALONE])
    # Verdicts that rest on the reference's time beside a candidate against alone run after the
    # rest, one at a time: with lanes side by side on a small machine the two come from different loads.
    for problem, name in TIMING_BOUND:
        results[name] = evaluate(problem, ADVERSARIAL / f"{name}.py", options)
    return results


@pytest.mark.parametrize("attempt", params(CPU + PRECISION_CPU))
def test_attempt_fails_and_names_the_trick(cpu_results, attempt):
    assert_caught(cpu_results[attempt.name], attempt)


@pytest.mark.parametrize("name", [name for _, name in REACH])
def test_what_its_process_does_never_reaches_the_reference(cpu_results, name):
    """A hook on every module, a kept input swapped for a slower class or re-homed, oneDNN turned off for
    the process, a spinning process left behind: each slowed the reference while it ran in the candidate's
    process. In a process of its own, with the candidate's stopped while it runs, it is not slowed."""
    result = cpu_results[name]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.speedup < 1.5, (result.speedup, result.warnings)


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


def test_a_fault_of_one_call_in_twenty_is_met_however_short_the_timing(cpu_options):
    """A timing that stops after 10 calls still compares at least stages.CHECKED_CALLS timed outputs: the
    20th call, wrong, is among them."""
    from harness.engine.timing.stages import CHECKED_CALLS

    options = dataclasses.replace(cpu_options, time_cap=0.05, min_samples=10, trials=2)
    result = evaluate(SMALL, ADVERSARIAL / f"{FAULTY}.py", options)
    assert result.verdict is Verdict.INCORRECT and "while being timed" in result.explanation, result.explanation
    assert result.timed_calls_checked >= CHECKED_CALLS


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
    assert [d.kind for d in result.problem_degenerate] == [Kind.CONSTANT]  # ...so the problem is flagged at load
    assert any("the same value everywhere" in w for w in result.warnings), result.warnings  # and by its lint


@pytest.mark.parametrize("attempt", params(ALONE))
def test_attempt_ends_in_a_verdict_not_an_exception(cpu_results, attempt):
    assert_caught(cpu_results[attempt.name], attempt)


HONEST_GPU = ["two_streams_joined", "graph_wrapper", "autograd_function", "waited_side_stream", "host_busy"]


@pytest.fixture(scope="module")
def gpu_results(cache_dir):
    options = EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=2.0)
    jobs = ([(LAYERNORM, a.name) for a in GPU] + [(SMALL, a.name) for a in STREAM_ORDER]
            + [(MATMUL_MEAN, a.name) for a in PRECISION_GPU] + REACH_GPU)
    results = evaluate_all(jobs, options, lanes=1)
    controls = evaluate_batch(SMALL, [HERE / "candidates" / f"{name}.py" for name in HONEST_GPU], options)
    return results | dict(zip(HONEST_GPU, controls))


@pytest.mark.gpu
@pytest.mark.parametrize("attempt", params(GPU + STREAM_ORDER + PRECISION_GPU))
def test_gpu_attempt_fails_and_names_the_trick(gpu_results, attempt):
    assert_caught(gpu_results[attempt.name], attempt)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [name for _, name in REACH_GPU])
def test_on_a_gpu_what_its_process_does_never_reaches_the_reference(gpu_results, name):
    result = gpu_results[name]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.speedup < 1.5, (result.speedup, result.warnings)


@pytest.mark.gpu
@pytest.mark.parametrize("name", HONEST_GPU)
def test_honest_kernels_that_use_streams_graphs_and_the_host_stay_correct(gpu_results, name):
    """Two streams forked and joined with events, a CUDA graph fed fresh inputs on the caller's stream, a
    host-bound autograd Function, a waited side stream, a busy host: honest, so `correct`, whatever the
    probes and the trace make of them."""
    result = gpu_results[name]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.hidden_work_ms is None and result.clock == "gpu", result.warnings


def test_every_attempt_is_tested_and_says_its_trick():
    files = {path.stem: path for path in ADVERSARIAL.glob("*.py")}
    tested = ({a.name for a in CPU + GPU + BACKWARD + STREAM_ORDER + PRECISION_GPU} | {name for name, _ in STATIC}
              | set(NEUTRALISED) | {DEGENERATE} | {a.name for a in ALONE} | {name for _, name in REACH + REACH_GPU}
              | {FAULTY})
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
