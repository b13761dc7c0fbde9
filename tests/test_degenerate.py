"""Degenerate problems, whose speedups measure nothing: found as the reference process loads the problem
(integrity/degenerate.py), and said by eval, the first prompt, describe_problem, the feedback and sweeps."""
import dataclasses
import importlib.util
import json

import pytest
import torch

from conftest import PROBLEMS, REPO
from test_history import cli
from harness.degenerate import Degenerate, Kind, problem_text
from harness.engine.evaluate import Evaluator
from harness.integrity import degenerate
from harness.problem import Shapes, shape_names
from harness.results import EvalResult, Verdict, from_json, to_json

SOFTMAX = PROBLEMS / "degenerate_softmax.py"  # softmax over a dimension of size 1: ones
COLUMNS = PROBLEMS / "degenerate_columns.py"  # a row's value repeated across its columns
CONSTANT = Degenerate(Kind.CONSTANT, value=1.0, shape=[64, 1], draws=3)
ALONG = Degenerate(Kind.CONSTANT_ALONG_DIM, dims=[1], shape=[64, 16], draws=2)


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def found_in(module) -> list[Degenerate]:
    """The check on a problem module in this process, drawing as the reference process does."""
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())

    def draw():
        with torch.no_grad():
            out = model(*module.get_inputs())
        return list(out) if isinstance(out, (list, tuple)) else [out]

    return degenerate.find(draw(), draw)


def find(fn, *shape):
    """The check on `fn` of a fresh randn(*shape) a draw."""
    def draw():
        out = fn(torch.randn(*shape))
        return list(out) if isinstance(out, tuple) else [out]

    return degenerate.find(draw(), draw)


# --- the check, in this process ------------------------------------------------------------------

def test_each_kind_is_told_apart_and_says_which_output_and_dims():
    weight = torch.randn(8, 4)
    (same,) = find(lambda x: weight + 0 * x, 8, 4)
    assert (same.kind, same.draws, same.output) == (Kind.INPUT_INDEPENDENT, 3, None)  # confirmed on a third draw
    (zero,) = find(lambda x: torch.clamp(torch.minimum(x, torch.zeros_like(x)), 0, 1), 8, 4)
    assert (zero.kind, zero.value) == (Kind.CONSTANT, 0.0) and "is 0 everywhere" in zero.text
    (rows,) = find(lambda x: x[:, :1].expand(8, 4).contiguous(), 8, 4)
    assert (rows.kind, rows.dims) == (Kind.CONSTANT_ALONG_DIM, [1]) and "repeats along dim 1" in rows.text
    (one,) = find(lambda x: x.sum() * torch.ones(3, 5), 8, 4)  # one value a draw, another on the next
    assert (one.kind, one.dims) == (Kind.CONSTANT_ALONG_DIM, [0, 1]) and "is one value everywhere" in one.text
    (second,) = find(lambda x: (x * 2, torch.ones(3) + 0 * x[0, :3]), 8, 4)
    assert (second.output, second.kind) == (1, Kind.CONSTANT) and second.text.startswith("Output 1 is 1 everywhere")
    assert find(lambda x: x.mean(dim=1, keepdim=True), 8, 4) == []  # a dimension of size 1 repeats nothing
    assert find(lambda x: x.argmax(dim=1), 64, 32) == []  # an integer output that changes


def test_comparisons_a_piece_at_a_time_count_the_last_piece(monkeypatch):
    """Outputs are compared PROBE elements first, then CHUNK elements at a time (a GPU's temporaries would be
    the size of a multi-GB output), split along the longest dimension and then the next: a difference in the
    last piece counts."""
    monkeypatch.setattr(degenerate, "CHUNK", 5)
    monkeypatch.setattr(degenerate, "PROBE", 3)
    x = torch.randn(6, 7, 3).expand(2, 6, 7, 3)  # strided views compare without a copy
    assert degenerate.equal(x[0], x[1]) and degenerate.repeating_dims(x) == [0]
    y = x.clone()
    y[1, -1, -1, -1] += 1
    assert not degenerate.equal(y[0], y[1]) and degenerate.repeating_dims(y) == []
    y[0, -1, -1, -1] = y[1, -1, -1, -1] = float("nan")
    assert degenerate.equal(y[0], y[1])  # NaN where NaN


def test_no_gradient_reaching_the_inputs():
    assert degenerate.no_gradient([None, torch.zeros(3)]) == Degenerate(Kind.NO_GRADIENT)
    assert degenerate.no_gradient([torch.zeros(3), torch.tensor([0.0, 1e-30])]) is None
    assert degenerate.no_gradient([]) is None  # no floating-point input: nothing to say


def problems():
    """Every problem shipped or tested here that loads: tests/problems as they are, problems/ with a batch of
    2 (a whole batch of their largest takes a CPU a minute for the check's two forwards)."""
    for path in sorted(PROBLEMS.rglob("*.py")) + sorted((REPO / "problems").glob("*.py")):
        module = load(path)
        if not hasattr(module, "get_inputs"):
            continue  # sweep/level2's broken problem
        if path.parent == REPO / "problems":
            Shapes(module).set({name: 2 for name in shape_names(path.read_text()) if name in ("batch_size", "tokens")})
        yield path, module


def test_no_honest_problem_is_flagged():
    flagged = {path.stem: [d.tag for d in found_in(module)] for path, module in problems()}
    assert len(flagged) > 20
    assert {stem: tags for stem, tags in flagged.items() if tags} == {
        "degenerate_softmax": ["constant (1)"], "degenerate_columns": ["constant_along_dim (dim 1)"]}


def test_findings_round_trip_through_json():
    result = EvalResult(Verdict.CORRECT, "", problem_degenerate=[CONSTANT, ALONG, Degenerate(Kind.NO_GRADIENT)])
    again = from_json(EvalResult, to_json(result))
    assert again.problem_degenerate == result.problem_degenerate and again.problem_degenerate[0].kind is Kind.CONSTANT
    assert "constant_along_dim" in json.loads(to_json(result))["problem_degenerate"][1]["kind"]
    assert from_json(EvalResult, json.dumps({"verdict": "correct", "explanation": ""})).problem_degenerate == []


def test_the_loop_never_calls_a_run_on_a_degenerate_problem_done():
    from harness.loop.feedback import Thresholds
    from harness.loop.loop import conclusion, goal_reached, outcome
    from harness.runs.records import Best, Outcome, ProblemRef, Run, StopReason
    from harness.runs.settings import Settings

    thresholds = Thresholds(accept=1.5, target=2.0)
    run = Run("r", Settings(), ProblemRef("p.py", "p", ""), "", stop_reason=StopReason.ROUNDS)
    for flagged, reached, said in ((False, StopReason.TARGET, "Target 2.0x reached in round 3"),
                                   (True, StopReason.NONE, "best 12.45x [12.00-13.00] in round 3, which measures "
                                                           "nothing: the problem is degenerate")):
        run.best = Best(round=3, sample=0, speedup=12.45, candidate="c.py", interval=[12.0, 13.0], degenerate=flagged)
        assert goal_reached(run, thresholds) is reached
        assert outcome(run.best, thresholds) is (Outcome.ACCEPTED if flagged else Outcome.TARGET)
        assert said in conclusion(run, [], thresholds)


# --- at load, and where it is said ------------------------------------------------------------------

def test_the_load_flags_a_constant_output_and_eval_says_its_speedup_means_nothing(cpu_options, tmp_path):
    from harness.loop.feedback import Thresholds, feedback_text
    from harness.loop.prompts import Prompts

    options = dataclasses.replace(cpu_options, trials=3, shapes="off", time_cap=0.3)
    with Evaluator(SOFTMAX, options) as evaluator:
        evaluator.start_reference()
        assert evaluator.reference_info.degenerate == [CONSTANT]
        assert evaluator.reference_info.load_seconds["degenerate"] >= 0
        result = evaluator.evaluate(REPO / "tests" / "adversarial" / "constant_output.py")
    # the candidate cannot be blamed for the problem: its verdict stands, its speedup is not read as one
    assert result.verdict is Verdict.CORRECT and result.problem_degenerate == [CONSTANT], result.explanation
    assert not Thresholds(accept=0.01, target=0.01).reached(result)
    said = feedback_text(Prompts(), 1, result, Thresholds(accept=0.01, target=0.01), [], cpu=True)
    assert "The problem is degenerate. The output is 1 everywhere on 3 input draws" in said
    assert "No speedup on it finishes the task" in said and "the task is done" not in said

    rc, out = cli("eval", str(SOFTMAX), str(REPO / "tests" / "adversarial" / "constant_output.py"), "--device",
                  "cpu", "--cache-dir", str(options.cache_dir), "--time-cap", "0.3", "--trials", "3")
    assert rc == 0, out
    assert "problem  The problem is degenerate. The output is 1 everywhere" in out, out
    assert "(means nothing: the problem is degenerate)" in out, out


def test_the_load_flags_an_output_constant_along_one_dim_and_the_first_prompt_says_so(cpu_options):
    from harness.engine.pool import Pool
    from harness.loop.prompts import Prompts
    from harness.loop.start import untimed_first
    from harness.runs.settings import Settings

    for path, found in ((COLUMNS, [ALONG]), (PROBLEMS / "small_layernorm.py", [])):
        with Pool(path, cpu_options) as pool:
            text = untimed_first(pool, Prompts(), pool.problem, Settings(device="cpu"), 5)
            assert pool.evaluators[0].reference_info.degenerate == found
        if found:
            assert f"## This problem is degenerate\nThe problem is degenerate. {ALONG.text}" in text
            assert "(shape (64, 16)) repeats along dim 1 on 2 input draws" in text
        else:
            assert "degenerate" not in text


def test_describe_problem_names_a_degenerate_problem(cpu_options, tmp_path):
    from harness.agent.judge import Judge
    from harness.runs.settings import Evaluation

    judge = Judge(cpu_options, Evaluation(trials=2, time_cap=0.3), [REPO], tmp_path / "runs")
    try:
        described = judge.describe(str(SOFTMAX))
    finally:
        judge.close()
    assert described.degenerate == [CONSTANT]
    assert f"## This problem is degenerate\n{problem_text([CONSTANT])}" in described.text


def test_under_backward_no_gradient_reaching_the_inputs_is_flagged(cpu_options, tmp_path):
    problem = tmp_path / "rounded.py"
    problem.write_text(  # round's gradient is zero everywhere; its output still changes with the input
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.scale = nn.Parameter(torch.ones(16))\n\n"
        "    def forward(self, x):\n        return torch.round(x * 4) * self.scale\n\n\n"
        "def get_inputs():\n    return [torch.randn(8, 16)]\n\n\ndef get_init_inputs():\n    return []\n")
    for backward, found in ((True, [Degenerate(Kind.NO_GRADIENT)]), (False, [])):
        with Evaluator(problem, dataclasses.replace(cpu_options, backward=backward)) as evaluator:
            evaluator.start_reference()
            assert evaluator.reference_info.degenerate == found
    assert "No gradient reaches the inputs" in problem_text([Degenerate(Kind.NO_GRADIENT)])


def test_a_sweep_leaves_degenerate_problems_out_of_fast_p_and_lists_them_apart(tmp_path):
    from harness.sweep.records import read_records

    level = tmp_path / "problems" / "level2"
    level.mkdir(parents=True)
    (level / "1_scale.py").write_text((PROBLEMS / "sweep" / "level1" / "1_scale.py").read_text())
    (level / "2_degenerate_softmax.py").write_text(SOFTMAX.read_text())
    out = tmp_path / "out"
    rc, said = cli("sweep", str(level.parent), "--copies", "--device", "cpu", "--time-cap", "0.3", "-o", str(out))
    assert rc == 0, said
    records = {r.problem: r for r in read_records(out / "results.jsonl")}
    assert records["2_degenerate_softmax"].degenerate == "constant (1)" and records["1_scale"].degenerate == ""
    assert all(r.correct for r in records.values()), records
    (summary,) = json.loads((out / "summary.json").read_text())
    assert summary["evaluations"] == 1 and summary["correct"] == 1  # the degenerate copy counts in no figure
    (apart,) = summary["degenerate"]
    assert (apart["problem"], apart["degenerate"]) == ("2_degenerate_softmax", "constant (1)")
    assert apart["speedup"] == records["2_degenerate_softmax"].speedup is not None
    assert ("level2: 1 evaluation(s) on degenerate problems, whose speedups measure nothing, left out of the "
            "figures above:\n  2_degenerate_softmax (copy): correct ") in said, said
    (line,) = [line for line in said.splitlines() if line.startswith("  2_degenerate_softmax (copy)")]
    assert line.endswith(", constant (1)"), said
