"""`harness sweep`: job discovery, the records on disk, the summary figures, and a real sweep
on the CPU killed mid-way and resumed."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.engine.children import DEVICE_WAITS
from harness.engine.pool import Builds
from harness.results import from_dict, to_dict
from harness.sweep.sweep import by_problem, pending
from harness.sweep.jobs import COPY_SUFFIX, Job, SuiteError, copy_jobs, find_jobs, problem_id, problem_levels
from harness.sweep.jobs import SOURCE_FILE
from harness.sweep.records import EVENTS_FILE, PROBLEM_ERROR, RESULTS_FILE, SweepRecord, ResultLog, read_records
from harness.sweep.summary import (P_MAX, LevelSummary, copy_check, copy_sentences, fast_p, fast_p_curves, fast_p_sure,
                                   geomean, seconds_rows, summarize, summary_rows)

HERE = Path(__file__).parent
PROBLEMS, CANDIDATES = HERE / "problems" / "sweep", HERE / "candidates" / "sweep"
ROOT = HERE.parent


def record(problem, verdict="correct", speedup=None, compiled=None, level="level1", candidate="c.py"):
    return SweepRecord(problem, level, candidate, 0, verdict, speedup, compiled)


# --- the figures, by hand ------------------------------------------------------

def test_fast_p_counts_correct_candidates_faster_than_p_beyond_the_resolution():
    speedups = [None, 0.5, 1.0, 1.6, 3.0]  # None: not correct
    assert fast_p(speedups, 0) == 4 / 5
    assert fast_p(speedups, 1) == 2 / 5  # 1.0 is not faster than 1
    # a copy's noise is not a win: 1.0003x is within the 0.1% the harness can vouch for, 1.002x beyond it
    assert fast_p([1.0003, 0.9997, 1.002, 1.0], 1) == 1 / 4
    assert fast_p(speedups, 1.5) == 2 / 5
    assert fast_p(speedups, 2) == 1 / 5
    assert fast_p([], 1) == 0.0


def test_sure_fast_p_needs_the_whole_interval_above_p():
    copies = [SweepRecord("a", "level1", "copy", 0, "correct", 1.0003, interval=[0.999, 1.005]),
              SweepRecord("b", "level1", "copy", 0, "correct", 1.019, interval=[1.012, 1.024]),
              SweepRecord("c", "level1", "copy", 0, "incorrect", 3.0, interval=[2.9, 3.1]),
              SweepRecord("d", "level1", "copy", 0, "correct", 1.6)]  # no interval: its speedup counts
    assert fast_p_sure(copies, 1) == 2 / 4 and fast_p_sure(copies, 1.5) == 1 / 4
    (level,) = summarize(copies)
    assert level.fast_p["1"] == 2 / 4 and level.fast_p_sure["1"] == 2 / 4  # a at 1.0003x is within resolution


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([0.5, 2.0, 1.0]) == pytest.approx(1.0)
    assert geomean([]) is None


def test_summary_per_level_keeps_problem_failures_apart():
    records = [record("a", speedup=4.0, compiled=1.2), record("a", "incorrect"), record("b", speedup=0.25, compiled=0.1),
               record("c", "timeout"), record("x", PROBLEM_ERROR, level="level2"),
               record("y", speedup=2.5, level="level2")]
    one, two = summarize(records)
    assert (one.level, one.evaluations, one.correct, one.correctness) == ("level1", 4, 2, 0.5)
    assert one.fast_p == {"0": 0.5, "1": 0.25, "1.5": 0.25, "2": 0.25}
    assert one.fast_p_compile == {"0": 0.5, "1": 0.25, "1.5": 0.0, "2": 0.0}
    assert one.geomean_speedup == pytest.approx(1.0)  # sqrt(4 * 0.25)
    assert one.failures == {"incorrect": 1, "timeout": 1}
    assert (two.evaluations, two.correct, two.broken_problems, two.fast_p_compile) == (1, 1, ["x"], None)
    assert two.fast_p["2"] == 1.0


def test_the_per_level_table_turns_to_a_column_a_level_where_the_terminal_is_narrow():
    from rich.console import Console

    from harness.cli.sweep import by_level, summary_table

    records = [record("a", speedup=1.2), record("b", "incorrect"), record("c", speedup=0.5, level="level2")]
    for r in records:
        r.clock, r.second_clock, r.speedup_second = "gpu", "latency", r.speedup
    summaries = summarize(records)
    headers, rows = summary_rows(summaries)
    turned_headers, turned = by_level(headers, rows)
    assert turned_headers == ["", "level1", "level2"]
    named = {row[0]: row[1:] for row in turned}
    assert named["correct"] == ["50.0%", "100.0%"] and named["gpu: fast_1"] == ["50.0%", "0.0%"]
    assert named["gpu: geomean"] == ["1.20x", "0.50x"] and named["latency: fast_1.5"] == ["0.0%", "0.0%"]
    narrow, wide = Console(width=80, record=True), Console(width=200, record=True)
    for console in (narrow, wide):
        console.print(summary_table(summaries, console))
    turned_text, wide_text = narrow.export_text(), wide.export_text()
    assert "…" not in turned_text and "gpu: geomean" in turned_text and "1.20x" in turned_text
    assert "gpu: fast_1" in wide_text and "gpu: geomean" not in wide_text  # a row a level there


def test_the_seconds_per_level_are_medians_of_the_records_that_reached_the_device():
    def timed(start, check, time, shapes, beside=None):
        r = record("a", speedup=1.0)
        r.phases = {"build": 0.0, "start": start, "check": check, "time": time, "shapes": shapes}
        r.time_split = {"beside": beside} if beside is not None else {}
        r.waits = {DEVICE_WAITS[1]: time / 4} if beside is not None else {}
        return r
    built_only = record("b", "compile_error")
    built_only.phases = {"build": 30.0}
    records = [timed(0.0, 0.4, 1.0, 0.3, 0.5), timed(0.2, 0.6, 2.0, 0.2, 0.7), timed(0.0, 0.5, 1.2, 0.3),
               built_only, record("x", PROBLEM_ERROR, level="level2")]
    one, two = summarize(records)
    seconds = one.seconds
    assert seconds.candidates == 3 and two.seconds is None
    assert seconds.device == pytest.approx(2.0) and seconds.device_mean == pytest.approx((1.7 + 3.0 + 2.0) / 3)
    assert seconds.phases == pytest.approx({"build": 0.0, "start": 0.0, "check": 0.5, "time": 1.2, "shapes": 0.3})
    assert seconds.time_steps == pytest.approx({"beside": 0.6})
    assert from_dict(LevelSummary, json.loads(json.dumps(to_dict(one)))).seconds == seconds
    headers, rows = seconds_rows([one, two])
    shown = {row[0].strip(): row[1:] for row in rows}
    assert headers == ["", "level1"] and shown["candidates"] == ["3"]
    assert shown["device side: start + check + time + shapes"] == ["2.00"] and shown["its mean"] == ["2.23"]
    assert shown["time"] == ["1.20"] and shown["beside the reference"] == ["0.60"]
    assert shown["re-check of its outputs"] == ["-"]
    assert seconds.device_waits == pytest.approx({DEVICE_WAITS[1]: 0.375})  # of the two that waited
    assert shown[DEVICE_WAITS[1]] == ["0.38"] and DEVICE_WAITS[0] not in shown  # none recorded that wait
    assert seconds_rows([two]) == ([], [])


def test_fast_p_curves_per_level_with_the_sure_and_the_compile_curves():
    records = [record("a", speedup=4.0, compiled=1.2), record("b", "incorrect"),
               SweepRecord("c", "level1", "c.py", 0, "correct", 1.2, interval=[0.9, 1.5]),
               record("x", PROBLEM_ERROR, level="level2"), record("y", speedup=2.5, level="level3")]
    curves = {(c.level, c.kind): dict(c.points) for c in fast_p_curves(records)}
    # level2's one problem failed itself: no curve rather than one at 0
    assert set(curves) == {("level1", "eager"), ("level1", "sure"), ("level1", "compile"), ("level3", "eager"),
                           ("level3", "sure")}
    assert curves["level1", "eager"][1.0] == 2 / 3 and curves["level1", "sure"][1.0] == 1 / 3
    assert curves["level1", "compile"][1.0] == 1 / 3 and curves["level3", "eager"][P_MAX] == 0.0


# --- finding the jobs -------------------------------------------------------------

def test_kernelbench_layout_finds_samples_by_problem_id():
    jobs = find_jobs(PROBLEMS, CANDIDATES)
    assert [(j.level, j.problem.name, j.label, j.sample) for j in jobs] == [
        ("level1", "1_scale.py", "level1/1/sample_0.py", 0), ("level1", "1_scale.py", "level1/1/sample_1.py", 1),
        ("level1", "2_shift.py", "level1/2/sample_0.py", 0), ("level1", "3_negate.py", "level1/3/sample_0.py", 0),
        ("level1", "3_negate.py", "level1/3/sample_1.py", 1), ("level2", "1_broken.py", "level2/1/sample_0.py", 0)]
    assert problem_id(Path("19_ReLU.py")) == "19" and problem_id(Path("layernorm.py")) == "layernorm"


def flat_copy(into: Path) -> dict[str, str]:
    """CANDIDATES as KernelBench's generate_samples.py names them, all in one folder; the flat name
    of each nested one."""
    names = {}
    for path in sorted(CANDIDATES.glob("level*/*/sample_*.py")):
        level, problem, sample = path.relative_to(CANDIDATES).parts
        flat = f"level_{level.removeprefix('level')}_problem_{problem}_{sample.removesuffix('.py')}_kernel.py"
        (into / flat).write_bytes(path.read_bytes())
        names[f"{level}/{problem}/{sample}"] = flat
    return names


def test_kernelbench_flat_sample_names_are_found_as_the_nested_ones(tmp_path):
    names = flat_copy(tmp_path)
    # a sample of problem 10 is not problem 1's, and the samples sort by number, not by name
    (tmp_path / "level_1_problem_10_sample_0_kernel.py").write_text("")
    (tmp_path / "level_1_problem_2_sample_10_kernel.py").write_text("")
    nested = find_jobs(PROBLEMS, CANDIDATES)
    flat = find_jobs(PROBLEMS, tmp_path)
    expected = [(j.level, j.problem.name, names[j.label], j.sample) for j in nested]
    expected.insert(3, ("level1", "2_shift.py", "level_1_problem_2_sample_10_kernel.py", 10))
    assert [(j.level, j.problem.name, j.label, j.sample) for j in flat] == expected


def test_matching_file_names(tmp_path):
    problems, candidates = tmp_path / "problems", tmp_path / "candidates"
    problems.mkdir()
    (candidates / "softmax").mkdir(parents=True)
    for name in ("layernorm.py", "softmax.py", "gelu.py"):
        (problems / name).write_text("")
    (candidates / "layernorm.py").write_text("")
    (candidates / "softmax" / "a.py").write_text("")
    (candidates / "softmax" / "b.py").write_text("")
    jobs = find_jobs(problems, candidates)
    assert [(j.level, j.problem.stem, j.label) for j in jobs] == [
        ("problems", "layernorm", "layernorm.py"), ("problems", "softmax", "softmax/a.py"),
        ("problems", "softmax", "softmax/b.py")]  # gelu has no candidate


def test_copies_are_the_problem_with_model_new(tmp_path):
    jobs = copy_jobs(PROBLEMS, tmp_path)
    assert len(jobs) == 4 and {j.label for j in jobs} == {"copy"}
    source = jobs[0].candidate.read_text()
    assert source == jobs[0].problem.read_text() + COPY_SUFFIX and "class ModelNew(Model)" in source


def test_the_copies_check_names_copies_read_wrong_and_intervals_that_leave_out_one():
    """A copy is its problem's own Model: it must read correct, and its like-for-like interval (over eager at full
    precision: the IEEE baseline where PyTorch's defaults changed the reference) must hold 1.0."""
    copy = lambda problem, verdict="correct", **figures: SweepRecord(problem, "level1", "copy", 0, verdict,  # noqa: E731
                                                                      **figures)
    records = [copy("a", speedup=1.001, interval=[0.995, 1.006]),
               copy("b", speedup=1.21, interval=[1.2, 1.22], speedup_ieee=1.0, interval_ieee=[0.99, 1.01]),  # TF32
               copy("c", speedup=0.998, interval=[0.9963, 0.9996]),
               copy("d", "incorrect"), copy("e", PROBLEM_ERROR),
               SweepRecord("f", "level1", "f.py", 0, "incorrect")]  # a candidate's failure is not the harness's
    check = copy_check(records)
    assert (check.copies, check.wrong, check.outside) == (4, ["level1/d: incorrect"],
                                                         ["level1/c: 0.9980x [0.9963-0.9996]"])
    wrong, miss = copy_sentences(check)
    assert wrong[1] == "wrong" and wrong[0].startswith("1 of 4 copies read other than correct (level1/d: incorrect)")
    assert miss[1] == "miss" and miss[0].startswith("1 of 3 correct copies has a like-for-like interval")
    assert copy_sentences(copy_check(records[:2])) == [("All 2 copies read correct, and every like-for-like interval "
                                                        "(over eager at full precision) holds 1.0.", "fine")]
    assert copy_check(records[-1:]) is None
    # a trial run again, its outputs lost on the way: the harness's own fault, caught, never "all hold"
    again = copy_sentences(copy_check([records[0], copy("g", speedup=1.0, interval=[0.99, 1.01], read_again=1)]))
    assert len(again) == 1 and again[0][1] == "again" and again[0][0].startswith(
        "1 of 2 copies had a trial whose outputs reached the reference process other than their worker summed them, "
        "run again (level1/g)")


def test_a_copies_sweep_fails_where_a_copy_reads_wrong(tmp_path, capsys):
    """Its copies are the harness's own check: one read other than correct fails the sweep (exit 1) and says so."""
    problems = tmp_path / "problems" / "level1"
    problems.mkdir(parents=True)
    (problems / "1_scale.py").write_text((PROBLEMS / "level1" / "1_scale.py").read_text())
    # its outputs differ in its copy (a subclass, ModelNew) by 1, far past any tolerance: its copy reads wrong. (An
    # output offset by the process's pid differed by too little where two pids were close.)
    (problems / "2_offset.py").write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x + float(type(self).__name__ == 'ModelNew')\n\n\ndef get_inputs():\n"
        "    return [torch.randn(64, 64)]\n\n\ndef get_init_inputs():\n    return []\n")
    argv = ["sweep", str(problems.parent), "--copies", "--device", "cpu", "--time-cap", "0.3"]
    assert main([*argv, "-o", str(tmp_path / "both")]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "1 of 2 copies read other than correct (level1/2_offset: incorrect)" in said
    (problems / "2_offset.py").unlink()
    assert main([*argv, "-o", str(tmp_path / "one")]) == 0  # its interval may miss 1.0 on a busy CPU: no failure
    said = " ".join(capsys.readouterr().out.split())
    assert "read other than correct" not in said and ("The copy read correct" in said or "leaves out 1.0" in said)


def test_bad_directories_are_one_paragraph(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        problem_levels(tmp_path / "missing")
    with pytest.raises(SuiteError, match="holds no .py problem files"):
        problem_levels(tmp_path)
    with pytest.raises(SuiteError, match="No candidate in"):
        find_jobs(PROBLEMS, tmp_path)


def test_cli_usage_errors_exit_2(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nowhere"), str(CANDIDATES), "--device", "cpu", "-o", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["sweep", str(PROBLEMS), "--device", "cpu", "-o", str(tmp_path)]) == 2
    assert "or --copies" in capsys.readouterr().err


def test_ray_flag_without_ray_says_how_to_install_it(tmp_path):
    code = (f"import sys; sys.modules['ray'] = None; from harness.cli.main import main; "  # None: import fails
            f"sys.exit(main(['sweep', {str(PROBLEMS)!r}, {str(CANDIDATES)!r}, '--ray', 'auto', "
            f"'-o', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'harness[ray]'" in done.stderr and "Traceback" not in done.stdout + done.stderr


def test_ray_flag_refuses_gpus(tmp_path, capsys):
    assert main(["sweep", str(PROBLEMS), str(CANDIDATES), "--ray", "auto", "--gpus", "0", "-o", str(tmp_path)]) == 2
    assert "--gpus picks this machine's GPUs" in capsys.readouterr().err


# --- the records ----------------------------------------------------------------

def test_results_log_drops_a_line_cut_short_and_refuses_to_overwrite(tmp_path):
    log = ResultLog(tmp_path, resume=False)
    log.append(record("a", speedup=2.0))
    log.close()
    with open(tmp_path / RESULTS_FILE, "a") as f:
        f.write('{"problem": "b", "lev')  # killed mid-write
    with pytest.raises(SuiteError, match="give --resume"):
        ResultLog(tmp_path, resume=False)
    log = ResultLog(tmp_path, resume=True)
    assert [r.problem for r in log.records] == ["a"]
    log.append(record("c", "incorrect"))
    log.close()
    assert [r.problem for r in read_records(tmp_path / RESULTS_FILE)] == ["a", "c"]


def test_damaged_results_name_the_line(tmp_path):
    (tmp_path / RESULTS_FILE).write_text('{"problem": "a"}\n[1, 2]\n')
    with pytest.raises(SuiteError, match="line 1"):
        read_records(tmp_path / RESULTS_FILE)


def test_pending_skips_what_is_recorded_and_duplicates(tmp_path):
    jobs = find_jobs(PROBLEMS, CANDIDATES)
    log = ResultLog(tmp_path, resume=False)
    first = jobs[0]
    log.append(SweepRecord(first.problem.stem, first.level, first.label, first.sample, "correct", 2.0))
    left = pending(jobs + jobs[:2], log)
    log.close()
    assert left == jobs[1:]
    assert [len(g) for g in by_problem(left)] == [1, 1, 2, 1]


# --- a real sweep, killed and resumed ---------------------------------------------

EXPECTED = {("level1", "1_scale", "level1/1/sample_0.py"): "correct",
            ("level1", "1_scale", "level1/1/sample_1.py"): "incorrect",
            ("level1", "2_shift", "level1/2/sample_0.py"): "correct",
            ("level1", "3_negate", "level1/3/sample_0.py"): "import_error",
            ("level1", "3_negate", "level1/3/sample_1.py"): "correct",
            ("level2", "1_broken", "level2/1/sample_0.py"): PROBLEM_ERROR}


def sweep_command(*extra, problems=PROBLEMS, candidates=CANDIDATES):
    return [sys.executable, "-m", "harness", "sweep", str(problems), str(candidates), "--device", "cpu",
            "--time-cap", "0.5", *extra]


def test_killed_bench_resumes_without_duplicates_or_losses(tmp_path):
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(sweep_command("-o", str(out)), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    results = out / RESULTS_FILE
    deadline = time.monotonic() + 240
    while not (results.is_file() and results.read_text().count("\n") >= 1):
        assert first.poll() is None and time.monotonic() < deadline, "the sweep wrote no result"
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_with = read_records(results)
    assert 1 <= len(killed_with) < len(EXPECTED)

    done = subprocess.run(sweep_command("--resume", str(out), "--csv", str(tmp_path / "r.csv")), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_records(results)
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)), "an evaluation was recorded twice"
    assert {r.key: r.verdict for r in records} == EXPECTED
    assert records[:len(killed_with)] == killed_with  # what the killed sweep wrote stays as it was

    # The sleeps make the fast candidates far over 2x and the slow one far under 1x anywhere.
    speedups = {r.key: r.speedup for r in records if r.correct}
    fast = [s for k, s in speedups.items() if k[1] != "2_shift"]
    assert all(s > 2 for s in fast) and speedups[("level1", "2_shift", "level1/2/sample_0.py")] < 1
    level1, level2 = json.loads((out / "summary.json").read_text())
    assert level1["evaluations"] == 5 and level1["correct"] == 3 and level1["correctness"] == 0.6
    assert level1["fast_p"] == {"0": 0.6, "1": 0.4, "1.5": 0.4, "2": 0.4}
    assert level1["fast_p_compile"] is None
    assert level1["geomean_speedup"] == pytest.approx(math.prod(speedups.values()) ** (1 / 3))
    assert level1["failures"] == {"incorrect": 1, "import_error": 1}
    assert (level2["evaluations"], level2["broken_problems"]) == (0, ["1_broken"])
    assert (out / "fast_p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "r.csv").read_text().splitlines()
    assert rows[0].startswith("problem,level,candidate,sample,verdict,speedup") and len(rows) == 7
    # where each correct evaluation's time went, for a sweep that runs slower than it should
    assert all({"check", "time"} <= set(r.phases) for r in records if r.correct)
    assert sum("time=" in row for row in rows) == 3
    # ...split finer by the replies the harness waited on, every trial's under one step
    assert all({"importing (building) the candidate", "running trial", "comparing trial", "being timed",
                "re-checking the timed outputs"} <= set(r.waits) for r in records if r.correct)
    assert all(sum(r.waits.values()) <= r.seconds for r in records if r.correct)
    # each process's peaks beside what an in-process evaluation would hold, for the memory table
    assert all(r.memory["candidate_worker"]["host"] > 0 and r.memory["reference"]["host"] > 0
               and r.sizes["in_process_need"] > r.sizes["inputs"] > 0 for r in records if r.correct)
    assert sum("candidate_worker=(host=" in row for row in rows) >= 3


def test_each_bench_has_a_results_folder_of_its_own(tmp_path):
    """KernelBench's flat sample names, swept twice from one folder: two results folders under
    sweep-results/, nothing else written where the sweep was started; --resume DIR carries one on."""
    problems, flat, work = tmp_path / "level1", tmp_path / "samples", tmp_path / "work"
    for folder in (problems, flat, work):
        folder.mkdir()
    (problems / "2_shift.py").write_bytes((PROBLEMS / "level1" / "2_shift.py").read_bytes())
    flat_copy(flat)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def sweep(*extra):
        done = subprocess.run(sweep_command(*extra, problems=problems, candidates=flat), cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)
        return done.returncode, done.stdout + done.stderr

    outputs = []
    for _ in range(2):
        rc, output = sweep()
        assert rc == 0, output
        assert "Seconds a candidate" in output and "This run: 1 evaluation(s) in" in output, output
        outputs.append(output)
    assert [p.name for p in work.iterdir()] == ["sweep-results"]
    first, second = folders = sorted((work / "sweep-results").iterdir())
    assert all(f.name.endswith(("-level1", "-level1-2")) for f in folders), folders
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir()) == sorted([RESULTS_FILE, EVENTS_FILE, "fast_p.png",
                                                                   "summary.json", SOURCE_FILE])
        events = [json.loads(line) for line in (folder / EVENTS_FILE).read_text().splitlines()]
        assert events and all(e["t"] > 0 and e["slot"] for e in events)
        assert any(e["text"].endswith(": correct") for e in events), events
        (record,) = read_records(folder / RESULTS_FILE)
        assert (record.candidate, record.verdict) == ("level_1_problem_2_sample_0_kernel.py", "correct")
    assert f"Results in {Path('sweep-results') / second.name / RESULTS_FILE}" in outputs[1]
    rc, output = sweep("--resume", str(first))
    assert rc == 0 and "1 already in" in output and "0 to go" in output, output
    assert len(read_records(first / RESULTS_FILE)) == 1
    rc, output = sweep("--resume", str(tmp_path / "never"))
    assert rc == 2 and "holds no results.jsonl" in output, output
    rc, output = sweep("-o", str(first))
    assert rc == 2 and f"give --resume {first}" in output, output


def test_a_problem_opened_unloaded_has_its_processes_importing_and_loads_when_evaluated(tmp_path, cpu_options):
    """The sweep's next problem, while the current one needs much of the GPU's memory: its
    processes start, its reference loads nothing until the pool evaluates, and then in the very
    process started for it; closed before that, it leaves no process."""
    from harness.sweep.sweep import Opened

    jobs = copy_jobs(PROBLEMS, tmp_path)
    waiting = Opened([jobs[0]], cpu_options, None, Builds(1), loaded=False)
    pool = waiting.ready()
    evaluator = pool.evaluators[0]
    blank = evaluator.children._blank_reference
    assert evaluator.reference is None and blank.alive() and not evaluator.reference_info.ready
    (result,) = pool.evaluate([jobs[0].candidate])
    assert result.verdict.value == "correct", result.explanation
    assert evaluator.reference is blank and evaluator.reference_info.ready
    waiting.close()

    never = Opened([jobs[1]], cpu_options, None, Builds(1), loaded=False)
    blank = never.ready().evaluators[0].children._blank_reference
    never.close()
    assert not blank.alive() and never.pool.evaluators[0].reference is None


def test_a_problem_opened_unloaded_loads_on_request_in_the_process_started_for_it(tmp_path, cpu_options):
    from harness.sweep.sweep import Opened

    job = copy_jobs(PROBLEMS, tmp_path)[0]
    opened = Opened([job], cpu_options, None, Builds(1), loaded=False)
    try:
        opened.load()
        evaluator = opened.ready().evaluators[0]
        reference = evaluator.reference
        assert evaluator.reference_info.ready and evaluator.children._blank_reference is None and reference.alive()
    finally:
        opened.close()
    assert not reference.alive()


def test_a_gpu_slot_opens_problems_ahead_and_evaluates_each_once(tmp_path, cpu_options):
    """A GPU's slot (run here on the CPU) opens the problems after the next before the current one
    has a result, so their imports are done when they come; every problem still gets one record."""
    import queue

    from harness.sweep.sweep import Sweep

    jobs = copy_jobs(PROBLEMS, tmp_path)
    log = ResultLog(tmp_path / "out", resume=False)
    sweep = Sweep(cpu_options, None, log)
    taken, take = [], sweep._take

    def recording_take(groups, gpu, loaded=True):
        opened = take(groups, gpu, loaded)
        if opened is not None:
            taken.append((opened.group[0].problem.stem, len(log.records)))
        return opened

    sweep._take = recording_take
    groups = queue.Queue()
    sweep.builds = Builds(1)
    for group in by_problem(jobs):
        groups.put((group, None))
    sweep._slot(0, groups)
    assert not sweep._errors
    assert [name for name, _ in taken] == ["1_scale", "2_shift", "3_negate", "1_broken"]
    assert taken[2][1] == taken[3][1] == 0  # the third and fourth opened while the first was evaluated
    verdicts = {(r.level, r.problem): r.verdict for r in log.records}
    assert len(log.records) == 4 and verdicts[("level2", "1_broken")] == PROBLEM_ERROR
    assert [v for v in verdicts.values() if v != PROBLEM_ERROR] == ["correct"] * 3


def test_the_next_problem_loads_at_the_first_check_and_starts_after_the_first_timing(tmp_path, cpu_options):
    """evaluate_problem tells prefetch once, as the first candidate's check begins, with the reference
    ready (its fit said) by then; and `timed` once, only after that candidate's timing: the next
    problem loads beside the check, and starts (its own checks) beside no timing."""
    from harness.sweep.sweep import Opened, evaluate_problem

    job = copy_jobs(PROBLEMS, tmp_path)[0]
    twice = [job, Job(job.problem, job.level, job.candidate, "copy again")]
    told, timed, records, phases = [], [], [], []
    opened = Opened(twice, cpu_options, None, Builds(1))
    try:
        evaluate_problem("cpu", opened, records.append, lambda slot, text: phases.append(text),
                         lambda pool: told.append((pool.evaluators[0].reference_info.ready, list(phases))),
                         lambda: timed.append(list(phases)))
    finally:
        opened.close()
    assert [ready for ready, _ in told] == [True]
    assert not any(p.endswith((": checking", ": timing")) for p in told[0][1])  # before the check is announced
    assert len(timed) == 1
    assert timed[0][-1].endswith(": timing") and not any(p.endswith("copy again: checking") for p in timed[0])
    assert [r.verdict for r in records] == ["correct", "correct"]


def test_three_candidates_of_one_problem_in_one_sweep_start_one_reference_process(tmp_path, cpu_options,
                                                                                   reference_starts):
    """Per-problem work once per batch: one reference process for the problem's candidates."""
    from harness.sweep.sweep import Opened, evaluate_problem

    job = copy_jobs(PROBLEMS, tmp_path)[0]
    three = [Job(job.problem, job.level, job.candidate, f"copy {n}") for n in range(3)]
    records = []
    opened = Opened(three, cpu_options, None, Builds(1))
    try:
        evaluate_problem("cpu", opened, records.append, lambda slot, text: None, lambda pool: None)
        assert reference_starts == [job.problem.stem]
    finally:
        opened.close()
    assert [r.verdict for r in records] == ["correct"] * 3


def test_a_loaded_problem_stages_its_first_candidate_for_the_pool_to_time(cpu_options):
    """Opened.load(stage=True), as a GPU slot loads the next problem once the current one's only
    candidate is timed: the first candidate's worker imports it and builds its models then, and the
    pool times it in that worker, not in a fresh one."""
    from harness.engine.building.builder import Builder
    from harness.problem import load_problem
    from harness.sweep.sweep import Opened

    problem = HERE / "problems" / "small_layernorm.py"
    job = Job(problem, "level1", HERE / "candidates" / "py_correct.py", "py_correct")
    with Builds(1) as builds:
        first = builds.submit(Builder(load_problem(problem), cpu_options), job.candidate)
        built = first.result()
        opened = Opened([job], cpu_options, None, builds, loaded=False, prebuilt=[first])
        opened.load(stage=True)
        pool = opened.ready()
        try:
            staged, children = built.result.worker_log, pool.evaluators[0].children
            assert staged and children._staged[0] is built
            assert children._spare is None  # the staged worker was the spare: no other imports beside it
            [result] = pool.evaluate(opened.candidates)
            assert result.verdict.value == "correct" and result.worker_log == staged
        finally:
            opened.close()


def _staged_beside(options, cap: int, problem=HERE / "problems" / "small_layernorm.py",
                   candidate=HERE / "candidates" / "py_correct.py"):
    """A problem not loaded (the one before needs the memory) whose first candidate is staged beside it
    within `cap` bytes, as a GPU slot's prefetch does (Opened.stage): its staged worker, and its result."""
    from harness.engine.building.builder import Builder
    from harness.problem import load_problem
    from harness.sweep.sweep import Opened

    job = Job(problem, "level1", candidate, "candidate")
    with Builds(1) as builds:
        first = builds.submit(Builder(load_problem(problem), options), job.candidate)
        built = first.result()
        opened = Opened([job], options, None, builds, loaded=False, prebuilt=[first])
        opened.stage(cap)
        pool = opened.ready()
        try:
            children = pool.evaluators[0].children
            assert children._staged[0] is built and children._staged[2] == cap
            assert not opened.loaded and children.reference is None  # staged, its reference not loaded
            staged = built.result.worker_log
            [result] = pool.evaluate(opened.candidates)
        finally:
            opened.close()
    return staged, result


def test_a_problem_not_loaded_beside_another_stages_its_first_candidate_all_the_same(cpu_options):
    """Opened.stage, where the next problem cannot load beside the current one: its first candidate's
    worker imports it and builds its models beside that one, and waits for its turn (TURN) before
    serving; the pool times it in that worker. (On the CPU no cap applies: the cap's side is a GPU test.)"""
    staged, result = _staged_beside(cpu_options, 1 << 30)
    assert result.verdict.value == "correct", result.explanation
    assert result.worker_log == staged and "built_at_turn" not in result.details


@pytest.mark.gpu
def test_a_staged_build_over_its_cap_waits_for_its_turn(cache_dir, tmp_path):
    """Staged beside another problem, models bigger than the cap are not built ahead (they could run that
    problem out of memory) but at the candidate's turn, in the same worker, to the same verdict. (Weights
    of 16 MB each: smaller ones fit the segment the worker's first allocation reserved, and take no more.)"""
    from harness import EvalOptions
    from harness.sweep.jobs import write_copy

    problem = tmp_path / "linear.py"
    problem.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
                       "        super().__init__()\n        self.linear = torch.nn.Linear(2048, 2048)\n\n"
                       "    def forward(self, x):\n        return self.linear(x)\n\n\n"
                       "def get_inputs():\n    return [torch.randn(64, 2048)]\n\n\n"
                       "def get_init_inputs():\n    return []\n")
    (tmp_path / "copy").mkdir()
    copy = write_copy(problem, tmp_path / "copy")
    options = EvalOptions(device="cuda", cache_dir=cache_dir, run_timeout=60, time_cap=1)
    for cap, at_turn in ((1 << 20, True), (1 << 30, None)):
        staged, result = _staged_beside(options, cap, problem, copy)
        assert result.verdict.value == "correct", result.explanation
        assert result.worker_log == staged and result.details.get("built_at_turn") is at_turn


def test_a_problem_refused_beside_another_loads_again_alone(tmp_path, cpu_options, monkeypatch):
    """A next problem loaded beside the current one reads the memory that one holds as taken: its
    refusal (DoesNotFit) is not the problem's, and it loads again once the current one has ended.
    A refusal with the device to itself stands. (The pool is a stand-in: the loads ahead of a GPU
    slot need a GPU.)"""
    from harness.engine.processes.footprint import DoesNotFit
    from harness.sweep import sweep as sweep_module

    loads = []

    class Refusing:
        """Refuses its first load, as one beside a big problem would."""

        def __init__(self, problem, *args, **kwargs):
            self.problem = problem

        def spawn(self):
            pass

        def prepare(self):
            loads.append(self.problem)
            if len(loads) == 1:
                raise DoesNotFit(f"Problem file {self.problem} does not fit: 80 GB free")

        def close(self):
            pass

    monkeypatch.setattr(sweep_module, "Pool", Refusing)
    job = copy_jobs(PROBLEMS, tmp_path)[0]
    beside = sweep_module.Opened([job], cpu_options, 0, Builds(1), loaded=False)
    beside.load(beside=True)
    assert beside.refused_beside()
    assert isinstance(beside.ready(), Refusing) and len(loads) == 2 and not beside.refused_beside()

    loads.clear()
    alone = sweep_module.Opened([job], cpu_options, 0, Builds(1), loaded=False)
    alone.load()
    assert not alone.refused_beside()
    with pytest.raises(DoesNotFit):
        alone.ready()
    assert len(loads) == 1


def test_the_next_problem_checks_beside_the_last_ones_other_shapes_and_times_after_them(tmp_path, cpu_options,
                                                                                         monkeypatch):
    """A GPU's slot (run here on the CPU) starts the next problem once the current one's only candidate
    is timed, where both fit the device at once: the next one's check runs beside the other shapes
    (here the first problem's shapes wait for it to begin, so the test does not hang on the machine's
    speed), and its timing waits until those shapes are over (its problem lint, between its check and its
    timing, never runs beside them either)."""
    import queue
    import threading

    from harness.engine.checking import trials
    from harness.engine.timing.measure import Measure
    from harness.sweep.sweep import Sweep

    groups = by_problem(copy_jobs(PROBLEMS, tmp_path))[:2]
    first, second = (group[0].problem.stem for group in groups)
    second_checks, overlapped, shapes_over, timed_at = threading.Event(), [], {}, {}
    check_shapes, time_once = trials.check_shapes, Measure._time

    def waiting_shapes(children, worker, result):
        if Path(children.problem.path).stem == first:
            overlapped.append(second_checks.wait(120))
            time.sleep(0.5)  # the second problem's check goes on meanwhile, its timing held back
        check_shapes(children, worker, result)
        shapes_over[Path(children.problem.path).stem] = time.monotonic()

    def noted_time(self, *args, **kwargs):
        timed_at.setdefault(Path(self.children.problem.path).stem, time.monotonic())
        return time_once(self, *args, **kwargs)

    def phase(slot, text):
        if text.startswith(f"level1/{second} ") and text.endswith(": checking"):
            second_checks.set()

    monkeypatch.setattr(trials, "check_shapes", waiting_shapes)
    monkeypatch.setattr(Measure, "_time", noted_time)
    log = ResultLog(tmp_path / "out", resume=False)
    sweep = Sweep(cpu_options, None, log, on_phase=phase)
    sweep.builds = Builds(1)
    pending_groups = queue.Queue()
    for group in groups:
        pending_groups.put((group, None))
    try:
        sweep._slot(0, pending_groups)
    finally:
        for thread in sweep._closing:
            thread.join()
    assert not sweep._errors
    assert [r.verdict for r in log.records] == ["correct", "correct"], [r.explanation for r in log.records]
    assert overlapped == [True]  # began while the first problem's shapes waited for it
    assert timed_at[second] >= shapes_over[first]
