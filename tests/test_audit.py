"""harness audit and Judge.audit: a second opinion, every invariant at its strictest, in processes of its own."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import CANDIDATES, PROBLEMS
from harness import Judge, Request, Verdict, evaluate, to_dict
from harness.engine.options import WEAKEN_VARIABLE
from harness.sweep.audit import AUDIT_FILE, CHECKS

from test_history import cli

SMALL = PROBLEMS / "small_layernorm.py"
MATMUL_MEAN = PROBLEMS / "matmul_mean.py"
ATTACKS = CANDIDATES.parent / "adversarial"


def flags(cache_dir) -> list[str]:
    return ["--device", "cpu", "--time-cap", "0.5", "--trials", "2", "--cache-dir", str(cache_dir)]


def test_an_honest_result_is_agreed_with_and_the_audit_exits_0(cpu_options, tmp_path, cache_dir):
    result = evaluate(SMALL, CANDIDATES / "py_correct.py", cpu_options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    target = tmp_path / "honest.json"
    target.write_text(json.dumps(to_dict(result)))
    rc, out = cli("audit", str(target), *flags(cache_dir))
    assert rc == 0 and "agree     py_correct.py: correct" in out and "1 agree, 0 disagree" in out, out
    (record,) = json.loads((tmp_path / f"honest.{AUDIT_FILE}").read_text())
    assert record["agree"] and record["audit_verdict"] == "correct" and record["audit_seconds"] > 0


def test_what_a_weakened_judge_let_through_the_audit_names_with_its_check(cpu_options, tmp_path, cache_dir,
                                                                          monkeypatch):
    """The fast verdict with its precision check switched off passes a bfloat16 GEMM; the audit, which no
    switch weakens, fails it by the precision check and exits 1."""
    monkeypatch.setenv(WEAKEN_VARIABLE, "precision")
    weak = evaluate(MATMUL_MEAN, ATTACKS / "bf16_gemm_mean.py", cpu_options)
    assert weak.verdict is Verdict.CORRECT, weak.explanation
    target = tmp_path / "weak.json"
    target.write_text(json.dumps([to_dict(weak)]))
    rc, out = cli("audit", str(target), *flags(cache_dir))
    assert rc == 1 and "disagree  bf16_gemm_mean.py: correct" in out, out
    assert CHECKS["LowerPrecision"] in out and "further from the reference computed in float64" in out
    monkeypatch.delenv(WEAKEN_VARIABLE)
    assert evaluate(MATMUL_MEAN, ATTACKS / "bf16_gemm_mean.py", cpu_options).verdict is Verdict.INCORRECT


def test_a_sweep_is_found_again_from_its_folder_and_a_run_by_its_id(tmp_path, cache_dir):
    problems = tmp_path / "problems"
    shutil.copytree(PROBLEMS / "sweep", problems)
    rc, out = cli("sweep", str(problems / "level1"), "--copies", *flags(cache_dir), "-o", str(tmp_path / "sw"))
    assert rc == 0, out
    rc, out = cli("audit", str(tmp_path / "sw"), "--top", "2", *flags(cache_dir))
    assert rc == 0 and out.count("agree     level1/") == 2, out
    assert len(json.loads((tmp_path / "sw" / AUDIT_FILE).read_text())) == 2


def test_a_trainer_audits_the_rewards_it_paid(cpu_options, monkeypatch):
    """Judge.audit on the judge's own records, a candidate given as text among them; a record it never gave
    is refused in a sentence."""
    monkeypatch.setenv(WEAKEN_VARIABLE, "precision")
    with Judge(cpu_options) as judge:
        asked = [Request(SMALL, (CANDIDATES / "py_correct.py").read_text()),
                 Request(MATMUL_MEAN, ATTACKS / "bf16_gemm_mean.py")]
        records = list(judge.evaluate(asked))
        assert [r.verdict for r in records] == ["correct", "correct"]
        audited = {Path(r.problem).name: r for r in judge.audit(records)}
    assert audited[SMALL.name].agree
    caught = audited[MATMUL_MEAN.name]
    assert not caught.agree and caught.check == CHECKS["LowerPrecision"]


def test_what_the_fast_verdict_samples_the_audit_checks_every_time(cpu_options, tmp_path):
    """A bfloat16 GEMM on half its calls at random: the fast verdict's one float64 trial meets it half the time;
    the audit's fifteen, all but once in 30,000. Whatever the fast verdict was, the audit's is incorrect by the
    precision check, and where the fast verdict passed it, they disagree."""
    from harness.sweep.audit import AuditItem, audit

    candidate = ATTACKS / "bf16_gemm_some_calls.py"
    fast = evaluate(MATMUL_MEAN, candidate, cpu_options)
    (record,) = audit([AuditItem("some", MATMUL_MEAN, candidate, fast.verdict.value, fast.speedup,
                                 fast.speedup_interval)], cpu_options)
    assert record.audit_verdict == "incorrect", record.why
    assert record.agree == (fast.verdict is Verdict.INCORRECT)
    if not record.agree:
        assert record.check == CHECKS["LowerPrecision"] and "float64" in record.why


def test_a_kernel_right_only_at_randns_scale_passes_the_fast_verdict_and_the_audit_names_the_inputs(cpu_options,
                                                                                                  tmp_path):
    """A softmax that does not subtract each row's maximum: the fast verdict's inputs never overflow it; the
    audit's, scaled by a thousand, do, and the float64 reference there is finite. A copy of the reference stays
    correct on every distribution."""
    from harness.sweep.audit import AuditItem, audit

    problem, candidate = PROBLEMS / "softmax_rows.py", ATTACKS / "unstable_softmax.py"
    fast = evaluate(problem, candidate, cpu_options)
    assert fast.verdict is Verdict.CORRECT, fast.explanation
    (record,) = audit([AuditItem("unstable", problem, candidate, fast.verdict.value, fast.speedup,
                                 fast.speedup_interval)], cpu_options)
    assert not record.agree and record.check == CHECKS["IncorrectOnInputs"], record.line
    assert "scaled by 1000" in record.why and "non-finite" in record.why, record.why
    copy = module_file(tmp_path / "copy.py", "torch.softmax(x, dim=-1)")
    honest = evaluate(problem, copy, cpu_options.audited())
    assert honest.verdict is Verdict.CORRECT, honest.explanation
    assert honest.details["other_inputs"] == {"large": "passed", "small": "passed", "shifted": "passed",
                                              "zeros": "passed"}


def module_file(path: Path, returns: str, inputs: str = "") -> Path:
    """A file whose module's forward(x) returns `returns`: a problem's Model drawing `inputs`, else a ModelNew."""
    model = "Model" if inputs else "ModelNew"
    text = f"import torch\n\n\nclass {model}(torch.nn.Module):\n    def forward(self, x):\n        return {returns}\n"
    if inputs:
        text += f"\n\ndef get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    path.write_text(text)
    return path


@pytest.mark.parametrize("reference, inputs, candidate", [
    # equal in exact arithmetic, about 1,000x eager's relative error at a scale of 0.001 (a ten-millionth in
    # absolute terms): on moved inputs the comparison with float64 judges, not the precision ratio
    ("torch.tanh(x)", "torch.rand(16, 256)", "2.0 * torch.sigmoid(2.0 * x) - 1.0"),
    # a running sum as a matmul with a triangle of ones: a few ulps of sums near 3e4 off once randn is scaled
    # by 1000, where CPU eager's cumsum is correctly rounded: atol follows the inputs' scale there
    ("torch.cumsum(x, dim=1)", "torch.randn(64, 1024)", "x @ torch.triu(torch.ones(x.shape[1], x.shape[1]))"),
], ids=["tanh_by_sigmoid", "cumsum_by_matmul"])
def test_an_honest_formula_is_not_blamed_on_moved_inputs(cpu_options, tmp_path, reference, inputs, candidate):
    problem = module_file(tmp_path / "problem.py", reference, inputs)
    result = evaluate(problem, module_file(tmp_path / "candidate.py", candidate), cpu_options.audited())
    assert result.verdict is Verdict.CORRECT and set(result.details["other_inputs"].values()) == {"passed"}, \
        result.explanation
