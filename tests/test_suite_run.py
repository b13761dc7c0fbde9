"""`harness run --suite DIR`: one run per problem, several at once, a suite record that `runs`
lists and `show` prints, requests of different problems in flight together, and a stopped
suite resumed. Real runs on the CPU over tests/problems/sweep, whose references sleep, so a
plain-Python candidate clears the target without a build."""
import io
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from fake_openai_server import KEY, MODEL, Reply, fake_openai  # noqa: F401  (fixture)
from harness.cli.display import SuiteDisplay
from harness.cli.history import print_runs, print_show
from harness.cli.run_command import main as run
from harness.loop.suite import plan, resume_suite, run_suite, start_suite
from harness.runs.settings import Evaluation, Settings
from harness.runs.store import RunStore
from harness.runs.suites import SUITE_FILE, Standing, SuiteProblem, SuiteRecord, SuiteStore
from harness.sweep.jobs import SuiteError

from conftest import CANDIDATES, PROBLEMS, REPO

SUITE, FILES = PROBLEMS / "sweep", CANDIDATES / "sweep"


def eval_flags(cache_dir) -> list[str]:
    return ["--device", "cpu", "--time-cap", "0.5", "--cache-dir", str(cache_dir)]


def suite_dir(runs: Path) -> Path:
    (path,) = [p for p in runs.iterdir() if (p / SUITE_FILE).is_file()]
    return path


def by_name(record: SuiteRecord) -> dict[str, SuiteProblem]:
    return {p.name: p for p in record.problems}


def test_the_record_round_trips_and_bad_suites_are_refused(tmp_path):
    store = SuiteStore.create(tmp_path, "level1")
    record = SuiteRecord(id=store.id, directory="/p", settings=Settings(proposer="files", files=["/f"]),
                         evaluation=Evaluation(trials=3), concurrency=2, created="2026-01-01T00:00:00+00:00",
                         problems=[SuiteProblem("/p/a.py", "a", "p", run="r1", standing=Standing.FINISHED,
                                                stop_reason="target", outcome="target", rounds=2, best=2.5),
                                   SuiteProblem("/p/b.py", "b", "p")])
    store.save(record)
    loaded = SuiteStore.open(store.path).load()
    assert loaded == record and loaded.finished == 1 and loaded.problems[0].standing is Standing.FINISHED
    assert store.id.startswith("suite-") and store.status(loaded) == "interrupted"  # running, nobody holds it
    with pytest.raises(SuiteError, match="person at an editor"):
        plan(SUITE, Settings(proposer="human"))
    with pytest.raises(SuiteError, match="no candidate files for 2 of the suite's problems \\(2_shift, 3_negate\\)"):
        plan(SUITE / "level1", Settings(proposer="files", files=[str(FILES / "level2")]))
    assert [(p.level, p.name) for p in plan(SUITE, Settings(proposer="files", files=[str(FILES)]))] == [
        ("level1", "1_scale"), ("level1", "2_shift"), ("level1", "3_negate"), ("level2", "1_broken")]
    # the live view: problems done, and each problem's round, phase and best so far
    out = io.StringIO()
    display = SuiteDisplay(Console(file=out, width=120), loaded, lambda: 65.0)
    display.phase(loaded.problems[1], 3, 0, "timing")
    loaded.problems[1].standing = Standing.RUNNING
    Console(file=out, width=120).print(display)
    assert "1/2 problems done  elapsed 01:05" in out.getvalue()
    assert [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.getvalue().splitlines()
            if "│" in line] == [["a", "2/10", "", "2.50x", "finished: target"], ["b", "3/10", "timing", "-", "running"]]


def test_files_suite_makes_a_run_per_problem_and_a_summary(tmp_path, cache_dir, capsys):
    runs = tmp_path / "runs"
    rc = run(["--suite", str(SUITE), "--files", str(FILES), "--concurrency", "2", "--runs-dir", str(runs),
              *eval_flags(cache_dir)])
    out = capsys.readouterr().out
    assert rc == 1, out  # 2_shift has no acceptable candidate, 1_broken no run
    assert "proposer files (--files given)" in out
    record = SuiteStore.open(suite_dir(runs)).load()
    assert (record.status, record.finished, record.concurrency) == ("finished", 3, 2)
    problems = by_name(record)
    scale, shift, negate, broken = (problems[n] for n in ("1_scale", "2_shift", "3_negate", "1_broken"))
    assert (scale.standing, scale.stop_reason, scale.rounds) == ("finished", "target", 1) and scale.best > 2
    assert (shift.stop_reason, shift.outcome, shift.rounds) == ("files_exhausted", "below_accept", 1)
    assert shift.best < 1.5
    assert (negate.stop_reason, negate.rounds) == ("target", 2) and negate.best > 2
    assert broken.standing == "failed" and "get_inputs" in broken.message and not broken.run
    # one run directory per problem that could run, each a run of its own problem and candidate files
    run_dirs = sorted(p for p in runs.iterdir() if p.is_dir() and not (p / SUITE_FILE).exists())
    assert sorted(p.name for p in run_dirs) == sorted(p.run for p in (scale, shift, negate))
    for entry in (scale, shift, negate):
        stored = RunStore(runs / entry.run).load_run()
        assert stored.problem.name == entry.name and stored.status == "finished"
        assert all(f"/{entry.name.split('_')[0]}/sample_" in f for f in stored.settings.files)
        assert len(stored.rounds) == entry.rounds and stored.best.speedup == entry.best
    assert "1_scale: round 1: correct" in out and "3/4 finished" in out

    listed, shown = io.StringIO(), io.StringIO()
    assert print_runs(Console(file=listed, width=250), runs) == 0
    assert record.id in listed.getvalue() and "4 problems in sweep" in listed.getvalue()
    assert "suite finished: 3/4 problems done" in listed.getvalue()
    assert print_show(Console(file=shown, width=250), record.id[:24], runs) == 0
    shown = shown.getvalue()
    for entry in (scale, shift, negate, broken):
        assert entry.name in shown
    assert "files_exhausted" in shown and "get_inputs" in shown and "geomean" in shown


def test_requests_of_different_problems_are_in_flight_together(tmp_path, cache_dir, capsys, fake_openai,
                                                               monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # each answer waits until two requests have arrived: with one problem at a time, the first would wait 60 s
    fake_openai.fallback = Reply("Idea: drop the sleep. No code yet.", hold_until=2)
    runs = tmp_path / "runs"
    rc = run(["--suite", str(SUITE / "level1"), "--model", MODEL, "--base-url", fake_openai.url, "--rounds", "1",
              "--concurrency", "2", "--runs-dir", str(runs), *eval_flags(cache_dir)])
    assert rc == 1, capsys.readouterr().out
    arrivals = sorted(fake_openai.arrivals)
    assert len(arrivals) == 3 and arrivals[1] < min(fake_openai.replies)  # two problems asked at once
    assert arrivals[2] > min(fake_openai.replies)  # the third waited for a free slot
    firsts = {next(m["content"] for m in body["messages"] if m["role"] == "user") for body in fake_openai.requests}
    assert len(firsts) == 3  # each request is of its own problem
    record = SuiteStore.open(suite_dir(runs)).load()
    assert [(p.standing, p.stop_reason, p.rounds) for p in record.problems] == [("finished", "rounds", 1)] * 3


class StopAt:
    """A suite observer that records what it is told, and stops the suite after a given round."""

    def __init__(self, stop: threading.Event, problem: str = "", after_round: int = 0):
        self.stop, self.problem, self.after_round = stop, problem, after_round
        self.events: list[tuple[str, str]] = []

    def started(self, problem, run):
        self.events.append(("started", problem.name))

    def phase(self, problem, n, sample, phase):
        pass

    def say(self, problem, text):
        pass

    def round_done(self, problem, run, rnd):
        self.events.append(("round", f"{problem.name} {rnd.n}"))
        if (problem.name, rnd.n) == (self.problem, self.after_round):
            self.stop.set()

    def finished(self, problem):
        self.events.append(("finished", problem.name))


def test_a_stopped_suite_resumes_skipping_finished_problems(tmp_path, cpu_options):
    settings = Settings(proposer="files", files=[str(FILES)], device="cpu", runs_dir=str(tmp_path))
    store, record = start_suite(SUITE / "level1", settings, Evaluation(time_cap=0.5), concurrency=1)
    stop = threading.Event()
    try:
        record = run_suite(store, record, cpu_options, StopAt(stop, "3_negate", 1), stop=stop)
    finally:
        store.release()
    problems = by_name(SuiteStore.open(store.path).load())  # as saved
    assert record.status == "interrupted"
    assert [problems[n].standing for n in ("1_scale", "2_shift", "3_negate")] == ["finished", "finished",
                                                                                 "interrupted"]
    negate_run = problems["3_negate"].run
    assert RunStore(tmp_path / negate_run).load_run().status == "interrupted"

    store, record = resume_suite(store.path)
    watcher = StopAt(threading.Event())
    try:
        record = run_suite(store, record, cpu_options, watcher)
    finally:
        store.release()
    assert record.status == "finished" and record.finished == 3
    # the finished problems were skipped; 3_negate's run went on in its own directory from round 2
    assert watcher.events == [("started", "3_negate"), ("round", "3_negate 2"), ("finished", "3_negate")]
    negate = by_name(record)["3_negate"]
    assert (negate.run, negate.rounds, negate.stop_reason) == (negate_run, 2, "target")
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith("suite-")]) == 3


def test_ctrl_c_stops_the_suite_and_records_where_each_problem_stands(tmp_path, cache_dir):
    runs = tmp_path / "runs"
    child = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--suite", str(SUITE / "level1"), "--files", str(FILES),
         "--concurrency", "1", "--runs-dir", str(runs), *eval_flags(cache_dir)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in child.stdout:
        seen.append(line)
        if line.startswith("2_shift: run"):
            child.send_signal(signal.SIGINT)
            break
    rest = child.communicate(timeout=60)[0]
    assert child.returncode == 130, "".join(seen) + rest
    record = SuiteStore.open(suite_dir(runs)).load()
    assert record.status == "interrupted"
    assert [(p.name, p.standing) for p in record.problems] == [
        ("1_scale", "finished"), ("2_shift", "interrupted"), ("3_negate", "pending")]
    store = RunStore(runs / record.problems[1].run)
    assert store.status(store.load_run()) == "interrupted"  # recorded so, or its lock is free
