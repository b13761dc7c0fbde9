"""runs/ on disk: layout, atomic writes, rounds round-trip, partial rounds, errors."""
import json
import re

import pytest

from harness import BuildResult, EvalResult, Settings, Tokens, Verdict, from_json, to_json
from harness.runs.records import Best, ProblemRef, Round, Run, Sample
from harness.runs.store import RunStore, StoreError, new_run_id, utc_now


def make_run(store: RunStore) -> Run:
    return Run(id=store.id, settings=Settings(problem="/p/x.py", proposer="files", files=["a.py"]),
               problem=ProblemRef("/p/x.py", "x", "ab" * 32), created=utc_now())


def sample(verdict: Verdict, speedup=None, log=None, code="class ModelNew: pass\n") -> Sample:
    result = EvalResult(verdict, "explained", speedup=speedup,
                        build=BuildResult(ok=verdict is Verdict.CORRECT, seconds=1.0,
                                          log_path=str(log) if log else ""))
    return Sample(answer="<think>hm</think>\n```python\n" + (code or "") + "```", origin="file:a.txt",
                  extraction="ok" if code else "no_code", candidate=code, eval=result,
                  tokens=Tokens(100, 20), ask_seconds=1.5, eval_seconds=2.5)


def write_round(store: RunStore, rnd: Round) -> None:
    store.write_prompt(rnd.n, rnd.prompt)
    for i, s in enumerate(rnd.samples):
        store.write_answer(rnd.n, i, s.answer)
        if s.candidate is not None:
            store.write_candidate(rnd.n, i, s.candidate)
        store.write_eval(rnd.n, i, s.eval)
    store.save_round(rnd)


def test_run_directory_is_named_by_time_problem_and_short_id(tmp_path):
    store = RunStore.create(tmp_path / "runs", "layernorm_4d")
    assert re.fullmatch(r"\d{8}T\d{4}Z-layernorm_4d-[0-9a-f]{6}", store.id)
    assert (store.path / "rounds").is_dir()
    assert new_run_id("p") != new_run_id("p")


def test_run_round_trips_through_run_json(tmp_path):
    store = RunStore.create(tmp_path, "x")
    run = make_run(store)
    run.best = Best(round=2, sample=0, speedup=2.5, candidate="rounds/002/candidate.py")
    run.tokens = Tokens(10, 5)
    store.save_run(run)
    loaded = store.load_run()
    assert loaded == run and loaded.tokens.total == 15
    assert from_json(Run, to_json(run)) == run


def test_rounds_round_trip_with_files_in_the_design_layout(tmp_path):
    store = RunStore.create(tmp_path, "x")
    log = tmp_path / "b.log"
    log.write_text("nvcc output\n")
    first = Round(n=1, prompt="the problem", samples=[sample(Verdict.COMPILE_ERROR, log=log)],
                  started=utc_now(), seconds=4.0)
    second = Round(n=2, prompt="feedback", chosen=1, started=utc_now(), seconds=9.0,
                   samples=[sample(Verdict.NO_CODE, code=None), sample(Verdict.CORRECT, 2.2)])
    write_round(store, first)
    write_round(store, second)
    d1 = store.path / "rounds" / "001"
    assert sorted(p.name for p in d1.iterdir()) == [
        "answer.md", "build.log", "candidate.py", "eval.json", "prompt.md", "round.json"]
    assert (d1 / "build.log").read_text() == "nvcc output\n"
    assert (store.path / "rounds" / "002" / "samples" / "2" / "candidate.py").is_file()
    assert not (store.path / "rounds" / "002" / "candidate.py").exists()  # sample 1 had no code
    meta = json.loads((store.path / "rounds" / "002" / "round.json").read_text())
    assert "prompt" not in meta and "answer" not in meta["samples"][0]
    assert store.load_rounds() == [first, second]
    assert second.eval.speedup == 2.2 and second.tokens.total == 240


def test_round_without_round_json_is_the_partial_one_and_can_be_set_aside(tmp_path):
    store = RunStore.create(tmp_path, "x")
    write_round(store, Round(n=1, prompt="p", samples=[sample(Verdict.CORRECT, 1.1)]))
    store.write_prompt(2, "feedback")
    store.write_answer(2, 0, "an answer the run was killed on")
    assert len(store.load_rounds()) == 1
    assert store.partial_round(1) is None and store.partial_round(2) is not None
    aside = store.set_aside(2)
    assert (aside / "answer.md").read_text() == "an answer the run was killed on"
    assert aside.parent == store.path / "partial" and not (store.path / "rounds" / "002").exists()


def test_writes_leave_no_temporary_files(tmp_path):
    store = RunStore.create(tmp_path, "x")
    store.save_run(make_run(store))
    write_round(store, Round(n=1, prompt="p", samples=[sample(Verdict.CORRECT, 1.1)]))
    assert not [p for p in store.path.rglob(".*") if p.is_file()]


def test_events_are_appended_one_json_line_each(tmp_path):
    store = RunStore.create(tmp_path, "x")
    store.event("start", problem="x")
    store.event("phase", round=1, phase="building")
    lines = (store.path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["start", "phase"]


def test_unreadable_runs_are_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="is not a run directory: it has no run.json"):
        RunStore.open(tmp_path)
    store = RunStore.create(tmp_path, "x")
    (store.path / "run.json").write_text('{"id": "cut sh')
    with pytest.raises(StoreError, match=r"run\.json is not valid"):
        RunStore.open(store.path).load_run()
    write_round(store, Round(n=1, prompt="p", samples=[sample(Verdict.CORRECT, 1.1)]))
    (store.path / "rounds" / "001" / "eval.json").unlink()
    with pytest.raises(StoreError, match=r"eval\.json is missing"):
        store.load_rounds()
