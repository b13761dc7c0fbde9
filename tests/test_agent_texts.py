"""What `harness mcp` says to an agent, as pure text: feedback and the first prompt for a reader that sends
files (with a run, or without one), and the tools' descriptions in the words of the server's device. The
same texts through a real server: tests/test_mcp.py."""
import pytest

from harness import load_problem
from harness.agent import texts
from harness.agent.judge import OPTIONS, Judge
from harness.agent.inputs import AgentError
from harness.engine.options import EvalOptions
from harness.loop.feedback import Past, feedback_text
from harness.loop.prompts import Prompts, Reader, first_prompt
from harness.runs.settings import Evaluation

from conftest import CANDIDATES, PROBLEMS, REPO
from test_feedback import T, compile_error, correct
from test_prompts import CPU, CPU_FACTS

# what only the loop's conversation has: its answer is a ```python block, its best candidate pinned in it
LOOP_ONLY = ("pinned above", "```python block")


def test_without_a_run_a_verdict_stands_alone_no_round_no_table_no_end():
    text = feedback_text(Prompts(), 1, correct(2.3), T, [], cpu=True, reader=Reader.CALL)
    assert text.startswith("## Verdict: correct\n")
    assert "2.30x clears the target of 2.0x." in text
    for absent in ("Round", "Rounds so far", "the task is done", *LOOP_ONLY):
        assert absent not in text, absent
    failed = feedback_text(Prompts(), 1, compile_error(), T, [], reader=Reader.CALL)
    assert failed.startswith("## Verdict: compile_error\n") and "Fix the compile errors" in failed
    assert "Round" not in failed


def test_in_a_run_an_agent_is_told_of_rounds_and_where_its_best_candidate_is():
    best = [Past(1, correct(1.9))]
    slower = feedback_text(Prompts(), 2, correct(1.2), T, best, cpu=True, reader=Reader.RUN)
    assert slower.startswith("## Round 2: correct\n") and "## Rounds so far\n| round |" in slower
    assert ("Slower than round 1's 1.90x beyond the noise: continue from round 1's candidate (show_round gives "
            "its source), not from this one.") in slower
    assert not [phrase for phrase in LOOP_ONLY if phrase in slower]
    done = feedback_text(Prompts(), 2, correct(2.3), T, best, reader=Reader.RUN)
    assert "2.30x clears the target of 2.0x: the task is done." in done


def test_the_loops_own_feedback_keeps_its_words():
    text = feedback_text(Prompts(), 2, correct(1.2), T, [Past(1, correct(1.9))])
    assert text.startswith("## Round 2: correct\n") and "(pinned above)" in text and "## Rounds so far" in text
    assert "the task is done" in feedback_text(Prompts(), 1, correct(2.3), T, [])


def test_an_agent_is_asked_to_send_its_file_and_the_loops_model_to_answer_with_a_block():
    problem = load_problem(PROBLEMS / "small_layernorm.py")
    agent = first_prompt(Prompts(), problem, CPU, accept=1.5, target=2.0, trials=5, reader=Reader.CALL, **CPU_FACTS)
    loop = first_prompt(Prompts(), problem, CPU, accept=1.5, target=2.0, trials=5, **CPU_FACTS)
    assert agent.rstrip().endswith("Write the complete file, then send it to `evaluate`: its path (`path`) or its "
                                   "text (`source`).")
    assert "```python block" not in agent
    assert loop.rstrip().endswith("end your answer with the complete file in one ```python block.")
    assert agent.split("## Building quickly")[0] == loop.split("## Building quickly")[0]


@pytest.mark.parametrize("cpu", [True, False])
def test_the_tools_speak_of_the_servers_device(cpu):
    said = [texts.instructions(cpu), *texts.descriptions(cpu).values(), texts.words(cpu).kernel]
    gpu_words = ("CUDA", "Nsight", "ncu", "occupancy")
    if cpu:
        assert not [(word, line) for line in said for word in gpu_words if word in line]
        assert "a first C++ build" in texts.descriptions(cpu)["evaluate"]
        assert "under the torch profiler" in texts.descriptions(cpu)["profile"]
    else:
        assert "a first CUDA build" in texts.descriptions(cpu)["evaluate"]
        assert "Nsight Compute" in texts.descriptions(cpu)["profile"]
    assert set(texts.descriptions(cpu)) == {"describe_problem", "start_run", "evaluate", "profile", "history",
                                            "best", "show_round"}


def test_arguments_a_schema_refuses_are_said_in_one_sentence():
    errors = [{"type": "greater_than_equal", "loc": ("options", "trials"), "msg": "Input should be greater than or "
               "equal to 1", "input": 0, "url": "https://errors.pydantic.dev/v/greater_than_equal"},
              {"type": "missing", "loc": ("problem",), "msg": "Field required", "input": {"path": "x.py"}}]
    assert texts.refused_arguments("evaluate", errors) == (
        "evaluate refused its arguments: `options.trials`: Input should be greater than or equal to 1 (given 0); "
        "`problem`: Field required.")


def test_unknown_options_are_refused_by_name_before_anything_runs(tmp_path):
    judge = Judge(EvalOptions(device="cpu", cache_dir=tmp_path / "cache"), Evaluation(), [REPO], tmp_path / "runs")
    try:
        for run in (None, "any-run"):
            with pytest.raises(AgentError) as refused:
                judge.evaluate(str(PROBLEMS / "small_layernorm.py"), path=str(CANDIDATES / "py_correct.py"),
                               run=run, options={"bogus": 1, "trials": 2, "colour": "red"})
            said = str(refused.value)
            assert said == (f"Unknown evaluation option(s) bogus, colour: `options` takes only {', '.join(OPTIONS)}.")
        assert not (tmp_path / "runs").exists()
    finally:
        judge.close()
