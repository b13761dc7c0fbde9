"""The corpus of attacks: each case's header read from its text (harness/sweep/corpus.py), its jobs, and
`harness sweep --adversarial` over a few cases on the CPU (test_adversarial.py judges them all)."""
import dataclasses
import json
from pathlib import Path

import pytest

from conftest import CANDIDATES, HERE, PROBLEMS, REPO
from harness.cli.main import main
from harness.engine.options import EvalOptions
from harness.results import EvalResult, Verdict
from harness.sweep.corpus import CorpusError, InvariantTally, parse_case, parse_outcomes, tally, tally_rows
from harness.sweep.jobs import STRICT_LABEL, SuiteError, SweepSource, by_options, corpus_jobs, problem_of
from harness.sweep.records import read_records

ADVERSARIAL = HERE / "adversarial"
SMALL = PROBLEMS / "small_layernorm.py"
HEADER = """# A side stream nobody waits for.
# invariant: stream_order
# problem: tests/problems/small_layernorm.py
# problem[cuda]: problems/layernorm_4d.py
# device: cpu, cuda
# expect: incorrect "does not wait" "not ready" | rejected "replaced"
# expect[strict]: rejected "reaches into the harness"
# options: backward
import torch
# invariant: not read, the header ended above
"""


def test_a_header_is_read_from_the_comment_lines_a_case_opens_with():
    case = parse_case(HEADER, Path("corpus/side.py"))
    assert (case.name, case.invariant, case.devices, case.backward) == ("side", "stream_order", ("cpu", "cuda"), True)
    assert case.problem_on("cpu") == "tests/problems/small_layernorm.py"
    assert case.problem_on("cuda:1") == "problems/layernorm_4d.py"
    plain, strict = case.expectations
    assert not plain.strict and strict.strict
    assert [o.verdict for o in plain.outcomes] == [Verdict.INCORRECT, Verdict.REJECTED]
    assert plain.outcomes[0].says == ("does not wait", "not ready")
    assert str(plain) == 'incorrect "does not wait" "not ready" | rejected "replaced"'
    assert str(strict) == 'rejected "reaches into the harness" (under --policy strict)'
    only_cuda = parse_case(HEADER.replace("cpu, cuda", "cuda").replace("# problem[cuda]: problems/layernorm_4d.py\n",
                                                                          ""), Path("side.py"))
    assert only_cuda.expected_on("cpu") == () and only_cuda.expected_on("cuda") == only_cuda.expectations


@pytest.mark.parametrize("change, line, says", [
    (("# invariant: stream_order\n", ""), None, "has no invariant line"),
    (("# device: cpu, cuda\n", "# device: cpu, cuda\n# device: cpu\n"), 6, "gives `device` more than once"),
    (("stream_order", "timing"), 2, "names the invariant `timing`, which is none of the corpus's"),
    (("cpu, cuda", "gpu"), 5, "names the devices `gpu`"),
    (("# options: backward", "# option: backward"), 8, "has a header line `option:`"),
    (("options: backward", "options: fast"), 8, "names the options `fast`"),
    (("problem[cuda]", "problem[rocm]"), 4, "gives `problem[rocm]`"),
    (("expect[strict]", "expect[eval]"), 7, "gives `expect[eval]`"),
    (('incorrect "does not wait"', "wrong"), 6, "each outcome begins with a verdict"),
    (('| rejected "replaced"', "under 2"), 6, "`under 2` is not a speedup bound"),
    (('| rejected "replaced"', 'under 2x "late"'), 6, "fragments in double quotes come right after the verdict"),
    (('"not ready"', '""'), 6, "a fragment in double quotes is empty"),
])
def test_a_malformed_header_is_one_paragraph_naming_the_file_and_line(change, line, says):
    with pytest.raises(CorpusError) as caught:
        parse_case(HEADER.replace(*change), Path("corpus/side.py"))
    said = str(caught.value)
    assert said.startswith("Case file corpus/side.py" + (f", line {line}," if line else " ")), said
    assert says in said and "\n" not in said and "see docs/guards.md" in said


def test_an_outcome_is_met_by_its_verdict_a_fragment_and_its_bound():
    def result(verdict, explanation="", speedup=None, warnings=()):
        return EvalResult(verdict, explanation, speedup=speedup, warnings=list(warnings))

    wrong, = parse_outcomes('incorrect "while being timed" "differs"')
    assert wrong.met(result(Verdict.INCORRECT, "Trial 1: the output differs from the reference"))
    assert not wrong.met(result(Verdict.REJECTED, "the output differs"))  # the verdict counts, not only the sentence
    assert not wrong.met(result(Verdict.INCORRECT, "dtype torch.float16"))
    no_gain, = parse_outcomes("correct under 1.5x")
    assert no_gain.met(result(Verdict.CORRECT, speedup=1.1))
    assert not no_gain.met(result(Verdict.CORRECT, speedup=2.0)) and not no_gain.met(result(Verdict.CORRECT))
    warned, = parse_outcomes('correct "calls the reference op"')  # for `correct`, a warning holds the fragment
    assert warned.met(result(Verdict.CORRECT, "calls the reference op", warnings=["it calls the reference op itself"]))
    assert not warned.met(result(Verdict.CORRECT, "it calls the reference op itself"))
    either = parse_case(HEADER, Path("side.py")).expectations[0]
    assert either.met(result(Verdict.REJECTED, "It replaced torch.equal"))
    assert not either.met(result(Verdict.REJECTED, "It registered kernels of its own"))


def test_the_tally_counts_each_invariant_in_the_corpus_order():
    tallies = tally([("precision", "b", True), ("stream_order", "a", False), ("precision", "c", False),
                     ("stream_order", "d", True)])
    assert tallies == [InvariantTally("stream_order", ["d"], ["a"]), InvariantTally("precision", ["b"], ["c"])]
    headers, rows = tally_rows(tallies)
    assert headers == ["invariant", "caught", "missed", "missed cases"]
    assert rows == [["stream_order", "1", "1", "a"], ["precision", "1", "1", "c"], ["all", "2", "2", ""]]


def test_corpus_jobs_are_each_expectation_on_its_problem_for_the_device(tmp_path):
    cpu = {job.label: job for job in corpus_jobs(ADVERSARIAL, "cpu")}
    cuda = {job.label: job for job in corpus_jobs(ADVERSARIAL, "cuda")}
    assert cpu["reuses_freed_memory"].problem == SMALL.resolve()
    assert cuda["reuses_freed_memory"].problem == (REPO / "problems" / "layernorm_4d.py").resolve()
    assert "side_stream" in cuda and "side_stream" not in cpu
    assert cpu["calls_reference_op"].expect.met(EvalResult(Verdict.CORRECT, "", warnings=[
        "It calls the reference op itself: torch.nn.functional.layer_norm"]))
    strict = cpu["calls_reference_op" + STRICT_LABEL]
    assert strict.expect.strict and "compiles_reference" not in cpu  # its one expectation is under strict
    assert {job.level for job in cpu.values()} == {"adversarial"}
    options = EvalOptions(device="cpu")
    groups = {(o.policy, o.backward): [job.label for job in jobs] for o, jobs in by_options(list(cpu.values()),
                                                                                            options)}
    assert set(groups) == {("warn", False), ("strict", False), ("warn", True)}
    assert sorted(groups[("warn", True)]) == ["backward_caches_grads", "backward_mutates_grad_output"]
    # a case's problem: absolute, or from the repository's root, tried from its folder up
    assert problem_of(tmp_path / "case.py", str(SMALL)) == SMALL
    with pytest.raises(CorpusError, match=r"Case file .*case.py runs on the problem nowhere.py, which is neither"):
        problem_of(tmp_path / "case.py", "nowhere.py")
    with pytest.raises(SuiteError, match="holds no .py case files"):
        corpus_jobs(tmp_path, "cpu")


def test_the_source_of_a_corpus_sweep_is_found_again(tmp_path):
    source = SweepSource(adversarial=ADVERSARIAL, device="cpu")
    source.write(tmp_path)
    again = SweepSource.read(tmp_path)
    assert again.adversarial == ADVERSARIAL.resolve() and again.device == "cpu"
    assert [job.key for job in again.jobs(tmp_path)] == [job.key for job in source.jobs(tmp_path)]
    with pytest.raises(SuiteError, match="either --adversarial DIR or problems"):
        dataclasses.replace(source, problems=PROBLEMS).jobs(tmp_path)


def case_file(folder: Path, name: str, header: str, body: str) -> None:
    """A case whose problem is written as an absolute path, since the corpus lies outside the repository."""
    (folder / f"{name}.py").write_text(header.replace("tests/problems/", f"{PROBLEMS}/") + body)


def test_a_bad_header_stops_the_corpus_sweep_before_it_starts(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    case_file(corpus, "unlabelled", "# An attack without its header.\n", "import torch\n")
    assert main(["sweep", "--adversarial", str(corpus), "--device", "cpu", "-o", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err
    assert "unlabelled.py has no invariant, no problem, no device, no expect line" in " ".join(said.split())
    assert "Traceback" not in said
    assert main(["sweep", "--adversarial", str(ADVERSARIAL), "--policy", "strict", "--device", "cpu",
                 "-o", str(tmp_path / "out")]) == 2
    assert "drop --policy" in capsys.readouterr().err


def test_the_corpus_sweep_says_caught_and_missed_per_invariant(tmp_path, capsys, cache_dir):
    """A few cheap cases of the corpus (a subset: test_adversarial.py judges every CPU case) and one planted
    miss, an honest kernel whose header expects it caught: the table, the records, summary.json, exit 1."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("non_tensor_output", "patch_allclose", "compiles_reference"):
        text = (ADVERSARIAL / f"{name}.py").read_text()
        case_file(corpus, name, text, "")
    case_file(corpus, "honest", "# An honest LayerNorm, its header claiming a trick it does not play.\n"
              "# invariant: fresh_outputs\n# problem: tests/problems/small_layernorm.py\n# device: cpu\n"
              '# expect: incorrect "in the memory of an earlier call"\n', (CANDIDATES / "py_correct.py").read_text())
    out = tmp_path / "out"
    assert main(["sweep", "--adversarial", str(corpus), "--device", "cpu", "--time-cap", "0.3",
                 "--cache-dir", str(cache_dir), "-o", str(out)]) == 1
    said = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): " ".join(line.split()) for line in said.splitlines() if line.count("│") > 2}
    assert rows["runtime_guards"].startswith("│ runtime_guards │ 1 │ 0 │")
    assert rows["output_form"].startswith("│ output_form │ 1 │ 0 │")
    assert rows["static_policy"].startswith("│ static_policy │ 1 │ 0 │")  # its case under --policy strict
    assert rows["fresh_outputs"] == "│ fresh_outputs │ 0 │ 1 │ honest │"
    assert rows["all"].startswith("│ all │ 3 │ 1 │")
    assert 'missed honest (fresh_outputs): expected incorrect "in the memory of an earlier call"; got correct' in \
        " ".join(said.split())
    records = {r.candidate: r for r in read_records(out / "results.jsonl")}
    assert sorted(records) == ["compiles_reference" + STRICT_LABEL, "honest", "non_tensor_output", "patch_allclose"]
    assert records["patch_allclose"].caught and records["patch_allclose"].verdict == "rejected"
    assert records["patch_allclose"].expected == 'rejected "replaced torch.allclose"'
    assert records["honest"].caught is False and records["honest"].invariant == "fresh_outputs"
    summary = json.loads((out / "summary.json").read_text())["invariants"]
    assert {"invariant": "fresh_outputs", "caught": [], "missed": ["honest"]} in summary
