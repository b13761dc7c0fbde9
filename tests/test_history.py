"""Run history on real `harness run` runs with the files proposer on CPU.

Two runs are made once for the module (three evaluations in all) and copied
where a test damages them.
"""
import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli.main import main as harness
from harness.cli.history import print_replay
from harness import HistoryError, RunStore, Verdict, plot, promote
from harness.runs.history import Replay, list_runs, load, load_rounds, resolve, summarize
from harness.runs.plot import use_log_scale
from harness.cli.run_command import main as run

from conftest import PROBLEMS
from test_loop import FAST, SLOW, eval_flags

PROBLEM = PROBLEMS / "row_loop.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir) -> tuple[Path, Path, Path]:
    """runs/ with a run that reaches the target (slow, then fast) and one that stays below accept."""
    base = tmp_path_factory.mktemp("history")
    (base / "slow.py").write_text(SLOW)
    (base / "fast.py").write_text(FAST)
    runs_dir = base / "runs"
    codes = [run([str(PROBLEM), "--files", *(str(base / f) for f in files), "--runs-dir", str(runs_dir),
                  *eval_flags(cache_dir)]) for files in (["slow.py", "fast.py"], ["slow.py"])]
    assert codes[0] == 0
    fast, slow = sorted(runs_dir.iterdir(), key=lambda p: (p / "rounds" / "002" / "eval.json").is_file(),
                        reverse=True)
    return runs_dir, fast, slow


def cli(*argv: str) -> tuple[int, str]:
    """Run `harness ARGV`; its console is made wide so messages come back unwrapped."""
    out = io.StringIO()
    import harness.cli.main as module

    original = module.Console
    module.Console = lambda **options: Console(file=out, width=200)
    try:
        return harness(list(argv)), out.getvalue()
    finally:
        module.Console = original


def test_runs_lists_both_runs(runs):
    runs_dir, fast, slow = runs
    rc, out = cli("runs", "--runs-dir", str(runs_dir))
    assert rc == 0 and fast.name in out and slow.name in out and "finished: target" in out
    _, record = load(str(fast), runs_dir)
    assert f"{record.best.speedup:.2f}x" in out
    rc, out = cli("runs", "--runs-dir", str(runs_dir), "--problem", "nothing_like_it")
    assert rc == 0 and "No runs" in out


def test_show_rounds_and_files(runs):
    runs_dir, fast, _ = runs
    rc, out = cli("show", str(fast), "--runs-dir", str(runs_dir))
    assert rc == 0 and "correct" in out and "2 *" in out and "best: round 2" in out
    assert "--resume" not in out  # finished: nothing to carry on
    assert "tokens" not in out  # files, not a model: no tokens were counted, so no column says 0
    rc, out = cli("show", fast.name[:-2], "--round", "2", "--source", "--runs-dir", str(runs_dir))
    assert rc == 0 and "torch.tanh(x) * self.scale + 1.0" in out
    rc, out = cli("show", str(fast), "--round", "1", "--prompt", "--runs-dir", str(runs_dir))
    assert rc == 0 and out.strip()
    rc, out = cli("show", str(fast), "--round", "9", "--answer")
    assert rc == 2 and "Round 9" in out


def test_the_best_candidate_is_printed_and_its_path_usable_from_here(runs, monkeypatch):
    runs_dir, fast, _ = runs
    rc, out = cli("show", fast.name, "--best", "--source", "--runs-dir", str(runs_dir))
    assert rc == 0 and out.strip() == FAST.strip()
    rc, out = cli("show", fast.name, "--best", "--runs-dir", str(runs_dir))  # the candidate by default
    assert rc == 0 and out.strip() == FAST.strip()
    rc, out = cli("show", fast.name, "--best", "--prompt", "--runs-dir", str(runs_dir))
    assert rc == 0 and out == (fast / "rounds" / "002" / "prompt.md").read_text() + "\n"
    rc, out = cli("show", str(fast), "--best", "--round", "1")
    assert rc == 2 and "either --best or --round" in out
    # from elsewhere the path is absolute; from above the run, relative to here
    rc, out = cli("show", str(fast))
    assert rc == 0 and f"{fast.absolute() / 'rounds' / '002' / 'candidate.py'} (harness show" in out
    monkeypatch.chdir(runs_dir.parent)
    rc, out = cli("show", str(fast))
    assert rc == 0 and f", {Path('runs') / fast.name / 'rounds' / '002' / 'candidate.py'} (harness show" in out


def test_ambiguous_and_unknown_run_names(runs):
    runs_dir, fast, slow = runs
    common = next(i for i, (a, b) in enumerate(zip(fast.name, slow.name)) if a != b)
    with pytest.raises(HistoryError, match="matches 2 runs"):
        resolve(fast.name[:common], runs_dir)
    rc, out = cli("show", "zzz", "--runs-dir", str(runs_dir))
    assert rc == 2 and "No run matches 'zzz'" in out
    assert resolve(fast.name, runs_dir) == fast


def test_corrupt_runs_are_listed_and_never_crash(runs, tmp_path):
    runs_dir, fast, _ = runs
    damaged = tmp_path / "runs"
    for name in ("cut", "gone", "noeval", "zlist"):
        shutil.copytree(fast, damaged / fast.name.replace("row_loop", f"row_loop_{name}"))
    cut, gone, noeval, listed = sorted(damaged.iterdir())
    (cut / "run.json").write_text('{"id": "x", "sett')
    (gone / "run.json").unlink()
    (noeval / "rounds" / "002" / "eval.json").unlink()
    (listed / "run.json").write_text('[1, 2]')  # valid JSON, not an object
    entries = {e.path: e.status for e in list_runs(damaged)}
    assert entries[cut].startswith("corrupt: run.json unreadable")
    assert entries[listed].startswith("corrupt: run.json unreadable") and "must be a JSON object" in entries[listed]
    assert entries[gone].startswith("corrupt: no run.json")
    assert entries[noeval] == "damaged: round 2 has no eval.json"
    rc, out = cli("runs", "--runs-dir", str(damaged))
    assert rc == 0 and "corrupt" in out
    assert fast.name.split("-")[-1] in out  # the intact runs are still listed
    for path in (cut, gone, listed):
        rc, out = cli("show", str(path))
        assert rc == 2 and "Traceback" not in out and str(path) in out
    rc, out = cli("show", str(noeval))
    assert rc == 0 and "damaged: round 2 cannot be read" in out


def test_promote_writes_a_header_and_keeps_a_better_kernel(runs, tmp_path):
    runs_dir, fast, slow = runs
    kernels = tmp_path / "kernels"
    rc, out = cli("promote", str(fast), "--kernels-dir", str(kernels))
    target = kernels / "row_loop.py"
    assert rc == 0 and str(target) in out.replace("\n", "")
    text = target.read_text()
    assert f"from run {fast.name}" in text and "# speedup:" in text and "# date:" in text
    assert "torch.tanh(x) * self.scale + 1.0" in text
    rc, out = cli("promote", str(slow), "--kernels-dir", str(kernels))
    assert rc == 2 and "--force" in out and target.read_text() == text
    assert promote(str(slow), runs_dir, kernels, force=True).replaced is not None
    assert f"from run {slow.name}" in target.read_text()


def test_compare_side_by_side(runs):
    runs_dir, fast, slow = runs
    a, b = summarize(*load(str(fast), runs_dir)), summarize(*load(str(slow), runs_dir))
    assert (a.rounds_to_target, b.rounds_to_target) == (2, None)
    assert a.best_speedup > 2.0 > b.best_speedup
    rc, out = cli("compare", str(fast), str(slow))
    assert rc == 0 and "rounds to target" in out and "not reached" in out


def test_replay_measures_the_best_candidate_again(runs, cache_dir):
    runs_dir, fast, _ = runs
    rc, out = cli("replay", fast.name, "--runs-dir", str(runs_dir), *eval_flags(cache_dir))
    assert rc == 0, out
    assert "recorded" in out and "now" in out and "noise" in out and "recorded on" not in out


def test_replay_of_a_promoted_kernel_file_compares_with_its_header(runs, tmp_path, cache_dir):
    runs_dir, fast, _ = runs
    kernels = tmp_path / "kernels"
    promote(str(fast), runs_dir, kernels)
    kernel = kernels / "row_loop.py"
    rc, out = cli("replay", str(kernel), *eval_flags(cache_dir))
    assert rc == 2 and "row_loop.py" in out and "--problem" in out  # no problems/ beside this kernels/
    rc, out = cli("replay", str(kernel), "--problem", str(PROBLEM), *eval_flags(cache_dir))
    assert rc == 0, out
    assert "recorded (header)" in out and "now" in out and "noise" in out
    loose = tmp_path / "loose.py"
    loose.write_text(FAST)
    rc, out = cli("replay", str(loose), "--problem", str(PROBLEM), *eval_flags(cache_dir))
    assert rc == 0 and "Nothing was recorded" in out, out


def test_replay_says_when_the_gpu_differs(runs):
    _, fast, _ = runs
    recorded = load_rounds(RunStore(fast))[0][-1].eval
    result = Replay(fast.name, recorded, recorded.speedup, recorded, 0.1, "NVIDIA H100 80GB HBM3", "cpu")
    out = io.StringIO()
    assert print_replay(Console(file=out, width=200), result) == 0
    assert "recorded on NVIDIA H100" in out.getvalue() and "+0.0%, within" in out.getvalue()


def test_plot_writes_a_png_of_both_runs(runs, tmp_path):
    import matplotlib.image

    runs_dir, fast, slow = runs
    out = tmp_path / "plot.png"
    rc, text = cli("plot", fast.name, slow.name, "--runs-dir", str(runs_dir), "-o", str(out))
    assert rc == 0 and out.stat().st_size > 10_000
    drawn = plot([str(fast), str(slow)], runs_dir, out)
    assert drawn.runs == [fast.name, slow.name] and drawn.xlabel == "round" and "speedup" in drawn.ylabel
    height, width, _ = matplotlib.image.imread(out).shape
    assert (width, height) == drawn.size == (1000, 500)
    # every correct round with its interval; the names in a legend, none written over a line
    assert drawn.bars == 3
    bests = [load(str(run), runs_dir)[1].best for run in (fast, slow)]
    assert drawn.legend == [f"{run.name}, best {best.speedup:.2f}x in round {best.round}"
                            for run, best in zip((fast, slow), bests)] + ["accept 1.5x", "target 2x"]


def test_plot_draws_the_ceiling_where_the_run_recorded_one(runs, tmp_path):
    import json

    _, fast, _ = runs
    path = tmp_path / "runs" / fast.name
    shutil.copytree(fast, path)
    record = json.loads((path / "run.json").read_text())
    record["ceiling"] = 40.0
    (path / "run.json").write_text(json.dumps(record))
    drawn = plot([str(path)], path.parent, tmp_path / "ceiling.png")
    assert drawn.legend[-1] == "ceiling 40.00x (the most the hardware allows)"


def test_plot_into_a_directory_says_the_path_it_wrote(runs, tmp_path):
    runs_dir, fast, _ = runs
    into = tmp_path / "plots"
    into.mkdir()
    rc, text = cli("plot", fast.name, "--runs-dir", str(runs_dir), "-o", str(into))
    written = into / f"{fast.name}.png"
    assert rc == 0 and written.stat().st_size > 10_000 and f"Wrote {written}:" in text
    assert not (tmp_path / "plots.png").exists()
    rc, text = cli("plot", fast.name, "--runs-dir", str(runs_dir), "-o", str(tmp_path / "bare"))
    assert rc == 0 and (tmp_path / "bare.png").is_file() and f"Wrote {tmp_path / 'bare.png'}:" in text


def test_plot_turns_to_a_log_axis_when_speedups_span_10x(runs, tmp_path):
    import json

    assert not use_log_scale([0.9, 1.5, 2.0, 3.1]) and use_log_scale([0.6, 1.5, 2.0, 15.5])
    _, fast, _ = runs

    def copy_with(name: str, speedups: list[float]) -> Path:
        """The fast run as it would look with other speedups."""
        path = tmp_path / name / fast.name
        shutil.copytree(fast, path)
        record = json.loads((path / "run.json").read_text())
        for round_, speedup in zip(record["rounds"], speedups):
            round_["speedup"] = speedup
            result = path / "rounds" / f"{round_['n']:03d}" / "eval.json"
            recorded = json.loads(result.read_text())
            recorded["speedup"], recorded["speedup_interval"] = speedup, [speedup * 0.95, speedup * 1.05]
            result.write_text(json.dumps(recorded))
        (path / "run.json").write_text(json.dumps(record))
        return path

    wide, narrow = copy_with("wide", [0.6, 25.0]), copy_with("narrow", [1.2, 2.5])
    drawn = plot([str(wide)], wide.parent, tmp_path / "wide.png")
    assert drawn.log and "log scale" in drawn.ylabel and (tmp_path / "wide.png").stat().st_size > 10_000
    assert not plot([str(narrow)], narrow.parent, tmp_path / "narrow.png").log


def test_plot_goes_into_the_run_directory_by_default_and_names_verdicts_as_the_table(runs, tmp_path, monkeypatch):
    from harness.runs.plot import failed_text

    runs_dir, fast, _ = runs
    monkeypatch.chdir(tmp_path)
    rc, text = cli("plot", fast.name, "--runs-dir", str(runs_dir))
    written = fast / "plot.png"
    assert rc == 0 and written.stat().st_size > 10_000 and f"Wrote {written}:" in text
    assert not list(tmp_path.glob("*.png"))
    # the chart, the PNG and the rounds table share one vocabulary: the verdict's own name
    assert [failed_text(v) for v in (Verdict.COMPILE_ERROR, Verdict.INCORRECT, Verdict.NO_CODE)] == \
        ["compile_error", "incorrect", "no_code"]


def test_latest_names_the_newest_run_and_a_narrow_listing_keeps_ids_whole(runs):
    from harness.cli.history import runs_table
    from harness.runs.history import list_runs, resolve

    runs_dir, fast, slow = runs
    newest = max((fast, slow), key=lambda p: (p.name.split("-")[0], p.stat().st_mtime))
    assert resolve("latest", runs_dir) == newest
    rc, text = cli("show", "latest", "--runs-dir", str(runs_dir))
    assert rc == 0 and newest.name in text
    out = io.StringIO()
    Console(file=out, width=80).print(runs_table(list_runs(runs_dir), 80))
    assert fast.name in out.getvalue() and slow.name in out.getvalue()
    rc, text = cli("show", "latest", "--runs-dir", str(runs_dir / "none"))
    assert rc == 2 and "No run under" in text
