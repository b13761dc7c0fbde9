"""harness run --red-team: a model asked to break the judge, each round judged by the fast verdict and, where it
passes, by the audit; the breaks kept in the run, shown, and written out as test cases that hold.

The real runs are on CPU against tests/problems/matmul_mean.py with a bfloat16 GEMM (tests/adversarial), which
only the precision check tells from float32: with the fast verdict's precision check switched off
($HARNESS_TEST_WEAKEN, as tests/test_audit.py does) it passes, and the audit, which no switch weakens, does not.
"""
import json
import re
from pathlib import Path

from fake_openai_server import KEY, MODEL, fake_openai  # noqa: F401  (fixture)
from harness import DeviceInfo, Environment, EvalResult, Verdict, evaluate, load_problem
from harness.cli.run_command import SYSTEM_LABEL, USER_LABEL, main
from harness.engine.options import WEAKEN_VARIABLE
from harness.engine.processes.protocol import ReferenceReady
from harness.loop import red_team
from harness.loop.feedback import Thresholds
from harness.loop.prompts import Prompts
from harness.results import from_json, to_json
from harness.runs.breaks import BREAK_FILE, Break, case_text
from harness.runs.records import Audit, Round, Sample
from harness.sweep.audit import CHECKS

from conftest import HERE, PROBLEMS
from test_history import cli

MATMUL_MEAN = PROBLEMS / "matmul_mean.py"
BF16 = (HERE / "adversarial" / "bf16_gemm_mean.py").read_text()
HONEST = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
          "    def __init__(self, in_features, out_features):\n        super().__init__()\n"
          "        self.proj = nn.Linear(in_features, out_features, bias=False)\n\n"
          "    def forward(self, x):\n        return torch.matmul(x, self.proj.weight.t()).mean(dim=-1)\n")
WRONG = HONEST.replace(".mean(dim=-1)", ".sum(dim=-1)")
PRECISION = CHECKS["LowerPrecision"]


def flags(runs: Path, cache_dir: Path) -> list[str]:
    # any pass is fast enough to break the judge: the bar is not what these runs test
    return ["--red-team", "--accept", "0.01", "--target", "100", "--runs-dir", str(runs), "--device", "cpu",
            "--time-cap", "0.5", "--trials", "2", "--cache-dir", str(cache_dir)]


def header(case: Path) -> dict[str, str]:
    """A case file's `# key: value` lines at its top."""
    lines = case.read_text().splitlines()
    return dict(re.match(r"# (\w+): (.*)", line).groups() for line in lines[:4])


def sample(verdict: Verdict, speedup=None, audit=None, finding="") -> Sample:
    result = EvalResult(verdict, "The candidate's outputs do not match the reference. Trial 1: output 0 differs "
                        "from the reference in 3 of 128 elements.", speedup=speedup, details={"finding": finding})
    return Sample(answer="", origin="test", extraction="given", candidate="# code", eval=result, audit=audit)


# --- the record, the feedback and the case, pure ------------------------------------------------------------

def test_an_audit_round_trips_and_a_round_recorded_before_it_loads_without_one():
    broke = Audit(False, PRECISION, "It is 15000x further.", "LowerPrecision", "incorrect", seconds=0.6, broke=True)
    rnd = Round(1, "prompt", [sample(Verdict.CORRECT, 3.0, broke)])
    again = from_json(Round, to_json(rnd))
    assert again.samples[0].audit == broke and again.broke and again.audit_text == f"disagree: {PRECISION}"
    old = json.loads(to_json(rnd))
    del old["samples"][0]["audit"]
    assert from_json(Round, json.dumps(old)).samples[0].audit is None and not from_json(Round, json.dumps(old)).broke


def test_the_feedback_names_the_check_that_caught_each_attempt_and_speaks_of_the_judge():
    thresholds = Thresholds(1.5, 2.0)
    caught = sample(Verdict.INCORRECT, finding="TrialFailed")
    assert red_team.caught_by(caught) == "the fast verdict's correctness check"
    assert red_team.standing(caught, 1.5) == "caught by the fast verdict"
    assert "that check holds against this attack" in red_team.advice(caught, thresholds, cpu=True)
    broke = sample(Verdict.CORRECT, 3.0, Audit(False, PRECISION, "why", "LowerPrecision", "incorrect", broke=True))
    assert red_team.caught_by(broke) == f"the audit's {PRECISION}"
    assert red_team.standing(broke, 1.5) == "broke the judge"
    assert "Attack another check next" in red_team.advice(broke, thresholds, cpu=True)
    slow = sample(Verdict.CORRECT, 1.1, Audit(False, PRECISION, "why", "LowerPrecision", "incorrect"))
    assert red_team.standing(slow, 1.5) == "caught by the audit, below the 1.5x a break needs"
    honest = sample(Verdict.CORRECT, 1.1, Audit(True, verdict="correct", speedup=1.1))
    assert red_team.caught_by(honest) == "" and "neither saw anything wrong" in red_team.advice(honest, thresholds,
                                                                                                   cpu=True)
    unbuilt = sample(Verdict.COMPILE_ERROR)
    assert red_team.caught_by(unbuilt) == "" and "An attack must run to be judged" in red_team.advice(
        unbuilt, thresholds, cpu=True)
    rounds = [Round(n, "", [s]) for n, s in enumerate((caught, broke, honest), 1)]
    table = red_team.attempts_table(rounds)
    assert f"| 2 | correct | 3.00x | break: disagree: {PRECISION} | the audit's {PRECISION} |" in table
    assert "| 1 | incorrect | - | - | the fast verdict's correctness check |" in table
    text = Prompts().render("red_team_feedback.j2", **red_team.feedback_context(rounds[1], rounds[:2], thresholds,
                                                                                ["a note"]))
    assert text.startswith("## Round 2: broke the judge") and f"Caught by: the audit's {PRECISION}" in text
    assert "a note" in text and "## Attempts so far" in text


def test_a_break_becomes_a_case_whose_header_says_what_caught_it_and_what_the_judge_must_say():
    audit = Audit(False, PRECISION, "It is 15000x further.", "LowerPrecision", "incorrect", broke=True)
    found = Break("20261207T2144Z-matmul_mean-9ce651", 3, 0, str(MATMUL_MEAN), "ab" * 32, "cpu", 8.8, [0.8, 13.9],
                  audit)
    text = case_text(found, BF16, "tests/problems/matmul_mean.py")
    assert text.splitlines()[:4] == ["# invariant: precision", "# problem: tests/problems/matmul_mean.py",
                                     "# device: cpu", '# expect: incorrect "further from the reference computed in '
                                                      'float64"']
    assert text.endswith(BF16) and "round 3: the fast verdict passed it at 8.80x" in text
    timing = Break(found.run, 4, 1, found.problem, found.sha256, "cuda", 3.0, None,
                   Audit(False, "the evaluation repeated in new processes", "slower", "", "correct", 1.2, broke=True))
    assert timing.invariant == "timing" and timing.expect[0] == "correct"
    guard = Break(found.run, 5, 0, found.problem, found.sha256, "cpu", 3.0, None,
                  Audit(False, "the audit's rejected", "threads", "threads", "rejected", broke=True))
    assert guard.invariant == "threads" and guard.expect == ("rejected", Verdict.REJECTED.sentence.rstrip("."))


def test_the_red_team_prompts_say_the_goal_and_how_the_judge_checks_on_either_device():
    problem = load_problem(MATMUL_MEAN)
    facts = ReferenceReady(inputs=["`x`: cuda float32 (128, 64), contiguous"])
    gpu = red_team.first_prompt(Prompts(), problem, DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0"), accept=1.5,
                                trials=5, facts=facts, environment=Environment("cuda", torch="2.13.0+cu130"))
    cpu = red_team.first_prompt(Prompts(), problem, DeviceInfo("cpu", "x86_64", "cpu"), accept=1.5, trials=5,
                                facts=facts, environment=Environment("cpu", torch="2.13.0+cpu"))
    for text in (gpu, cpu):
        assert text.startswith("Break the judge") and problem.source.strip() in text
        assert "128x further from it than eager float32" in text and "A round breaks the judge" in text
    assert "Stream order" in gpu and "per-stream trace" in gpu and "Stream order" not in cpu
    assert "the faster of\n  the two counts" in cpu and "L2" not in cpu
    assert red_team.system_prompt(Prompts()).startswith("You test the judge of a kernel benchmark harness")


def test_a_dry_run_prints_the_red_team_prompts(cache_dir, capsys):
    rc = main([str(MATMUL_MEAN), "--red-team", "--dry-run", "--device", "cpu", "--cache-dir", str(cache_dir)])
    out = capsys.readouterr().out
    assert rc == 0
    system, user = out.split(USER_LABEL)
    assert "You test the judge" in system.split(SYSTEM_LABEL)[1] and user.lstrip().startswith("Break the judge")


def test_beam_is_refused_with_red_team(tmp_path, capsys):
    rc = main([str(MATMUL_MEAN), "--red-team", "--beam", "2", "--files", str(HERE / "adversarial" /
                                                                            "bf16_gemm_mean.py"),
               "--runs-dir", str(tmp_path / "runs"), "--device", "cpu"])
    assert rc == 2 and "--beam keeps the fastest candidates" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# --- real runs -------------------------------------------------------------------------------------------------

def test_a_model_that_breaks_a_weakened_judge_leaves_a_break_that_becomes_a_case_the_real_judge_catches(
        tmp_path, cache_dir, capsys, cpu_options, fake_openai, monkeypatch):
    monkeypatch.setenv(WEAKEN_VARIABLE, "precision")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake_openai.answer(f"I attack the precision check: a bfloat16 GEMM, its error averaged away.\n```python\n{BF16}```",
                       f"An honest float32 GEMM, to see both judges pass it.\n```python\n{HONEST}```")
    runs = tmp_path / "runs"
    rc = main([str(MATMUL_MEAN), "--model", MODEL, "--base-url", fake_openai.url, "--rounds", "2",
               *flags(runs, cache_dir)])
    out = capsys.readouterr().out
    assert rc == 1, out  # a round broke the judge
    (path,) = runs.iterdir()
    record = json.loads((path / "run.json").read_text())
    assert record["settings"]["red_team"] and record["stop_reason"] == "rounds"
    # the honest round breaks it only where the audit reads it slower beyond the noise (a busy machine)
    assert re.search(r"of 2 round\(s\) broke the judge \(round 1\b", record["message"]), record["message"]
    first, second = (json.loads((path / "rounds" / n / "round.json").read_text())["samples"][0]
                     for n in ("001", "002"))
    assert first["audit"]["broke"] and first["audit"]["check"] == PRECISION and first["audit"]["verdict"] == "incorrect"
    assert second["audit"]["verdict"] == "correct"  # the honest one: the audit passes it too
    assert f"BREAK, audit disagree: {PRECISION}" in out and "harness breaks" in out

    # the model was told the goal and how the judge works, then which check caught its attempt
    asked = fake_openai.requests
    assert "You test the judge" in asked[0]["messages"][0]["content"]
    assert "Break the judge" in asked[0]["messages"][1]["content"]
    feedback = asked[1]["messages"][-1]["content"]
    assert feedback.startswith("## Round 1: broke the judge") and f"Caught by: the audit's {PRECISION}" in feedback
    assert "Attack another check next" in feedback

    # the break, self-contained: the problem, the candidate and both verdicts
    kept = path / "breaks" / "001"
    assert (kept / "candidate.py").read_text() == BF16 and (kept / "matmul_mean.py").read_text() == \
        MATMUL_MEAN.read_text()
    assert json.loads((kept / "fast.json").read_text())["verdict"] == "correct"
    audited = json.loads((kept / "audit.json").read_text())
    assert audited["verdict"] == "incorrect" and audited["details"]["finding"] == "LowerPrecision"
    assert json.loads((kept / BREAK_FILE).read_text())["round"] == 1

    rc, shown = cli("show", str(path))
    assert rc == 0 and re.search(rf"\b1 .*disagree: {re.escape(PRECISION)} .*break", shown), shown
    rc, said = cli("report", str(path))
    page = (path / "report.html").read_text()
    assert rc == 0 and '<span class="badge bad">break</span>' in page and f"disagree: {PRECISION}" in page

    cases = tmp_path / "cases"
    rc, said = cli("breaks", str(path), "--into", str(cases))
    case = cases / f"precision_matmul_mean_{path.name.rsplit('-', 1)[1]}_r1.py"
    assert rc == 0 and f"Wrote {case}" in said
    head = header(case)
    assert head["invariant"] == "precision" and head["device"] == "cpu"
    verdict, fragment = re.fullmatch(r'(\w+) "(.*)"', head["expect"]).groups()
    problem = Path(head["problem"])
    assert problem.resolve() == MATMUL_MEAN.resolve() and case.read_text().endswith(BF16)
    # the weakened fast judge passes the case wrongly; the real one gives the verdict it expects
    assert evaluate(problem, case, cpu_options).verdict is Verdict.CORRECT
    monkeypatch.delenv(WEAKEN_VARIABLE)
    real = evaluate(problem, case, cpu_options)
    assert real.verdict.value == verdict == "incorrect" and fragment in real.explanation, real.explanation


def test_a_folder_of_attacks_replayed_against_the_real_judge_breaks_nothing(tmp_path, cache_dir, capsys):
    attacks = tmp_path / "attacks"  # replayed in name order
    attacks.mkdir()
    for name, source in (("1_sums.py", WRONG), ("2_bf16.py", BF16)):
        (attacks / name).write_text(source)
    runs = tmp_path / "runs"
    rc = main([str(MATMUL_MEAN), "--files", str(attacks), *flags(runs, cache_dir)])
    out = capsys.readouterr().out
    assert rc == 0, out  # the judge held
    (path,) = runs.iterdir()
    record = json.loads((path / "run.json").read_text())
    assert record["stop_reason"] == "files_exhausted" and [r["verdict"] for r in record["rounds"]] == \
        ["incorrect", "incorrect"]
    assert "the judge held in 2 round(s)" in record["message"] and not (path / "breaks").exists()
    feedback = (path / "rounds" / "002" / "prompt.md").read_text()
    assert feedback.startswith("## Round 1: caught by the fast verdict")
    assert "Caught by: the fast verdict's correctness check" in feedback and "that check holds" in feedback
    rc, said = cli("breaks", str(path))
    assert rc == 0 and "kept no breaks: the judge held in every round" in said
