"""The batch API: requests for many problems through a judge that streams each record as it
finishes, resumes from a results log, and keeps its reference processes from one call to the next."""
import dataclasses
import os
import shutil
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest

from conftest import CANDIDATES, PROBLEMS, REPO
from harness import EvalOptions, Judge, Request, evaluate, evaluate_many, read_records, to_dict
from harness.device import visible_gpus
from harness.engine.building.builder import Builder
from harness.sweep.batch import BatchError, _Chunk, default_judge
from harness.sweep.jobs import Job

SMALL = PROBLEMS / "small_layernorm.py"
LEVEL1 = PROBLEMS / "sweep" / "level1"
SAMPLES = CANDIDATES / "sweep" / "level1"


@pytest.fixture
def fast(cpu_options):
    return dataclasses.replace(cpu_options, time_cap=0.3)


def reference_pids(judge: Judge) -> dict:
    return {key: pool.evaluators[0].reference.proc.pid for key, pool in judge._pools.items()}


def test_a_second_call_starts_no_reference_process_for_a_problem_it_has_seen(fast, reference_starts):
    wrong = (CANDIDATES / "py_wrong.py").read_text()
    judge = default_judge()
    try:
        first = {r.candidate: r.verdict for r in evaluate_many([(SMALL, CANDIDATES / "py_correct.py"),
                                                                 (SMALL, wrong)], fast)}
        assert first == {str(CANDIDATES / "py_correct.py"): "correct", Request(SMALL, wrong).label: "incorrect"}
        assert reference_starts == ["small_layernorm"]
        pids = reference_pids(judge)
        second = {r.problem: r.verdict for r in evaluate_many([(SMALL, CANDIDATES / "py_wrong.py"),
                                                                (LEVEL1 / "1_scale.py", SAMPLES / "1" / "sample_0.py")],
                                                               fast)}
        assert second == {"small_layernorm": "incorrect", "1_scale": "correct"}
        assert default_judge() is judge
        assert reference_starts == ["small_layernorm", "1_scale"]  # the problem not seen before only
        assert {k: p for k, p in reference_pids(judge).items() if k in pids} == pids
        # each problem's workers log apart (each pool numbers its own from 1)
        for problem in ("small_layernorm", "1_scale"):
            assert list(fast.logs().glob(f"worker-{problem}-{os.getpid()}-*-1.log")), problem
    finally:
        judge.close()
    assert default_judge() is not judge  # a closed default judge is made anew


def test_records_stream_as_they_finish_and_a_log_resumes_without_evaluating_again(tmp_path, fast, monkeypatch):
    log = tmp_path / "log"
    scale, negate = LEVEL1 / "1_scale.py", LEVEL1 / "3_negate.py"
    first = [(scale, SAMPLES / "1" / "sample_0.py"), (negate, SAMPLES / "3" / "sample_1.py"),
             (scale, (SAMPLES / "1" / "sample_1.py").read_text())]
    with Judge(fast) as judge:
        streamed = [(record, len(read_records(log / "results.jsonl"))) for record in judge.evaluate(first, log=log)]
    # the first record came while the other problem's reference process had not even started
    assert streamed[0][1] < len(first)
    # one problem's candidates at a time, the problems in the order the requests name them
    assert [r.problem for r, _ in streamed] == ["1_scale", "1_scale", "3_negate"]
    assert sorted(r.verdict for r, _ in streamed) == ["correct", "correct", "incorrect"]

    built = []
    build = Builder.build
    monkeypatch.setattr(Builder, "build", lambda self, candidate, on_phase=None:
                        built.append(Path(candidate)) or build(self, candidate, on_phase))
    shift = (LEVEL1 / "2_shift.py", SAMPLES / "2" / "sample_0.py")
    with Judge(fast) as judge:
        records = list(judge.evaluate([*first, shift, first[0]], log=log))
    assert [to_dict(r) for r in records[:3]] == [to_dict(r) for r, _ in streamed]  # read back, first
    assert [(r.problem, r.verdict) for r in records[3:]] == [("2_shift", "correct")]
    assert built == [shift[1]]  # the one request the log did not hold, once
    assert len(read_records(log / "results.jsonl")) == 4


def test_the_example_runs_on_the_cpu_and_its_records_match_separate_evaluations(tmp_path, cache_dir, fast):
    problems, candidates = tmp_path / "problems", tmp_path / "candidates"
    (candidates / "small_layernorm").mkdir(parents=True)
    (candidates / "1_scale").mkdir()
    problems.mkdir()
    shutil.copy(SMALL, problems)
    shutil.copy(LEVEL1 / "1_scale.py", problems)
    for name in ("py_correct", "cpp_layernorm"):
        shutil.copy(CANDIDATES / f"{name}.py", candidates / "small_layernorm")
    shutil.copy(SAMPLES / "1" / "sample_1.py", candidates / "1_scale")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, str(REPO / "examples" / "batch_eval.py"), str(problems), str(candidates),
                          "--device", "cpu", "--time-cap", "0.3", "--log", str(tmp_path / "log")],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    first, second = out.stdout.split("call 2:")
    assert "3 candidates for 2 problems" in first and "pools opened: 2" in first
    assert "pools opened: 0" in second and "candidates a minute" in second
    alone = {f"{folder}/{name}": evaluate(problems / f"{folder}.py", candidates / folder / name, fast).verdict.value
             for folder, name in [("small_layernorm", "py_correct.py"), ("small_layernorm", "cpp_layernorm.py"),
                                  ("1_scale", "sample_1.py")]}
    assert sorted(alone.values()) == ["correct", "correct", "incorrect"]
    for call in ("call-1", "call-2"):
        records = read_records(tmp_path / "log" / call / "results.jsonl")
        assert {r.candidate: r.verdict for r in records} == alone
        assert all(r.phases for r in records)


def test_a_slot_takes_the_problems_it_holds_first_and_a_big_problem_is_split(tmp_path, fast):
    with Judge(fast) as judge:
        a, b, c = (_Chunk((name, "", ""), None, fast, [], None) for name in "abc")
        chunks = [a, b, c]
        judge._pools = OrderedDict({("a", "", "", 1): None, ("c", "", "", 0): None})
        assert judge._take(chunks, 0) is c  # its own
        assert judge._take(chunks, 0) is b  # no slot's
        assert judge._take(chunks, 0) is a  # another slot's, rather than idle
        assert judge._take(chunks, 0) is None
        judge._pools = OrderedDict()
        scale = [Job(LEVEL1 / "1_scale.py", "level1", SAMPLES / "1" / f"sample_{k % 2}.py", str(k)) for k in range(3)]
        negate = Job(LEVEL1 / "3_negate.py", "level1", SAMPLES / "3" / "sample_1.py", "n")
        split = judge._chunks([*scale, negate], fast, 2)  # two slots: a share is two candidates
        assert [[job.label for job in chunk.group] for chunk in split] == [["0", "1"], ["2"], ["n"]]
        assert split[0].key == split[1].key != split[2].key


def test_requests_say_what_is_wrong_with_them(tmp_path):
    assert Request(SMALL, CANDIDATES / "py_correct.py").label == str(CANDIDATES / "py_correct.py")
    text = (CANDIDATES / "py_correct.py").read_text()
    assert Request(SMALL, text).label == Request(str(SMALL), text).label != Request(SMALL, text + " ").label
    assert Request(SMALL, text).key == ("problems", "small_layernorm", Request(SMALL, text).label)
    with pytest.raises(BatchError, match="pathlib.Path"):
        Request(SMALL, "tests/candidates/py_correct.py")
    with pytest.raises(BatchError, match="a bytes"):
        Request(SMALL, text.encode())
    with pytest.raises(BatchError, match="evaluate_batch"):
        evaluate_many(SMALL)
    with pytest.raises(BatchError, match=r"\(problem, candidate\[, label\]\) tuple"):
        evaluate_many([CANDIDATES / "py_correct.py"])
    with Judge(EvalOptions()) as judge:
        pass
    with pytest.raises(BatchError, match="closed"):
        judge.evaluate([(SMALL, text)])


@pytest.mark.gpu
def test_a_second_call_on_the_gpus_starts_no_reference_process(cache_dir, reference_starts):
    options = EvalOptions(device="cuda", cache_dir=cache_dir, time_cap=1.0)
    batch = [(SMALL, CANDIDATES / "py_correct.py"), (SMALL, CANDIDATES / "py_wrong.py")]
    with Judge(options, visible_gpus()) as judge:
        first = {r.candidate: r.verdict for r in judge.evaluate(batch)}
        started, pids = list(reference_starts), reference_pids(judge)
        second = {r.candidate: r.verdict for r in judge.evaluate(batch)}
        assert first == second == {str(CANDIDATES / "py_correct.py"): "correct",
                                   str(CANDIDATES / "py_wrong.py"): "incorrect"}
        assert reference_starts == started and reference_pids(judge) == pids
