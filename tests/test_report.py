"""`harness report`: a real run (the files proposer on CPU, Python candidates, no build) and a real
sweep as HTML pages, checked as text and in headless Chromium where it is installed.

One candidate carries markup in a comment, as a model's answer could: the page must show it as
text, and the browser must find no script in the DOM and log nothing to its console.

HARNESS_REPORT_SCREENSHOTS=docs/img python -m pytest tests/test_report.py
writes the screenshots docs/ shows (report-run.png, report-sweep.png).
"""
import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.runs.history import load, load_rounds
from harness import run_page
from harness.runs.html import parent_of, round_ticks
from harness.loop.proposers.base import ProposerError
from harness.profiles import KernelProfile, Profile
from harness.cli.run_command import main as run

from conftest import CANDIDATES, PROBLEMS
from test_history import cli
from test_loop import FAST, SLOW, WRONG, ScriptedProposer, eval_flags, seed, stub_loop

PROBLEM = PROBLEMS / "row_loop.py"
# What an untrusted answer could carry: it must reach the page as text.
PAYLOAD = '# </pre><script>document.title="pwned"</script><img src=x onerror="document.title=1">'
# Debian ships the headless build alone as chromium-headless-shell
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chromium-headless-shell")
ROOFLINE = ("\n\ndef roofline_bytes():\n    # x read once and the output written once, float32\n"
            "    return 4 * 2 * 256 * 64\n")


@contextlib.contextmanager
def inside(folder: Path):
    """Work in `folder`, so paths read as a person there gives them (the pages show them)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.fixture(scope="module")
def report_run(tmp_path_factory, cache_dir) -> Path:
    """A run of four rounds: no code, correct but slow, wrong, and fast enough for the 2x target, on
    row_loop.py declaring its bytes, so the run has a physical ceiling."""
    base = tmp_path_factory.mktemp("report")
    (base / "row_loop.py").write_text(PROBLEM.read_text() + ROOFLINE)
    for name, text in (("slow.py", SLOW), ("wrong.py", WRONG), ("fast.py", PAYLOAD + "\n" + FAST)):
        (base / name).write_text(text)
    with inside(base):
        assert run(["row_loop.py", "--files", str(seed("004")), "slow.py", "wrong.py", "fast.py",
                    *eval_flags(cache_dir)]) == 0
    (path,) = (base / "runs").iterdir()
    return path


@pytest.fixture(scope="module")
def report_sweep(tmp_path_factory, cache_dir) -> Path:
    """tests/candidates/sweep on tests/problems/sweep: correct, incorrect, import errors and a broken problem."""
    base = tmp_path_factory.mktemp("sweep")
    shutil.copytree(PROBLEMS / "sweep", base / "problems")
    shutil.copytree(CANDIDATES / "sweep", base / "candidates")
    with inside(base):
        rc, text = cli("sweep", "problems", "candidates", "--device", "cpu", "--time-cap", "0.5",
                       "--cache-dir", str(cache_dir), "-o", "results")
    assert rc == 0, text
    return base / "results"


def test_run_report_holds_every_round_and_escapes_the_candidates(report_run, tmp_path):
    rc, out = cli("report", str(report_run))
    page = report_run / "report.html"
    assert rc == 0 and out.strip() == str(page)
    text = page.read_text()
    for n in range(1, 5):
        assert f'id="round-{n}"' in text
    _, record = load(str(report_run), report_run.parent)
    assert f"{record.best.speedup:.2f}x" in text and "accept 1.5x" in text and "target 2x" in text
    assert all(verdict in text for verdict in ("no code", "incorrect", "correct"))
    # the markup in round 4's candidate is text, in its code and in its diff against round 3
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert text.count(PAYLOAD.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")) >= 2
    assert "Diff against its parent, round 3" in text
    # a CPU run of files: no GPU clock, no tokens nobody counted, no one round's sample count for all
    assert "clock gpu" not in text and "tokens" not in text and "the median of each round" in text
    # nothing loads from anywhere: no scripts, links or sources, and a policy that forbids them
    assert not re.search(r"<(link|iframe|object)\b|<[a-z][^<>]*\s(src|href)=\"?[a-z]+:", text, re.I)
    assert "Content-Security-Policy" in text
    elsewhere = tmp_path / "somewhere" / "r.html"
    rc, out = cli("report", report_run.name, "--runs-dir", str(report_run.parent), "-o", str(elsewhere))
    assert rc == 0 and out.strip() == str(elsewhere) and elsewhere.read_text() == text


def test_parents_chart_ceiling_and_profile_findings(report_run):
    store, record = load(str(report_run), report_run.parent)
    rounds, damage = load_rounds(store)
    assert damage is None
    # round 2 follows round 1's answer, which held no code: the latest earlier candidate is its parent
    assert [parent_of(rounds, r, r.sample) for r in rounds] == [None, None, (2, 0), (3, 0)]
    assert record.ceiling and record.ceiling > record.best.speedup
    text = run_page(record, rounds)
    assert f"ceiling {record.ceiling:.2f}x: the most the hardware allows" in text and "Profile (" not in text
    # profile findings, as a --profile run on a GPU records them
    rounds[3].sample.eval.profile = Profile("ncu", [KernelProfile("tanh_kernel<<<>>>", 12.5, bottleneck="memory")],
                                            findings=["DRAM throughput at 91% of peak: memory-bound"])
    text = run_page(record, rounds)
    assert "DRAM throughput at 91% of peak" in text
    assert "tanh_kernel&lt;&lt;&lt;&gt;&gt;&gt;" in text
    # one marker per correct round, with its interval as error bars; the failed rounds on the strip
    svg = text[text.index("<svg"):text.index("</svg>")]
    assert svg.count("<circle") == 2 and svg.count(" stroke-width=\"1.5\" fill=\"none\"/>") == 2
    assert ">no_code<" in svg and ">incorrect<" in svg  # the verdicts as the table names them
    # a long run's rounds are labelled sparsely enough not to run into each other
    assert round_ticks(4) == [1, 2, 3, 4] and round_ticks(100)[:3] == [1, 5, 10] and len(round_ticks(100)) <= 30


def test_samples_beam_parents_and_a_restart_from_the_best(tmp_path):
    """Several samples a round under --beam, and a restart from the best (the loop with a stub evaluator)."""
    answers = ["# correct 1.2\n# A", "# correct 1.8\n# B", "# correct 1.5\n# C"]
    answers += [f"# correct 1.{n}\n# next {n}" for n in range(6)]
    loop, store = stub_loop(tmp_path / "beam", ScriptedProposer(*answers), samples=3, beam=2, rounds=2, plateau=0)
    loop.execute()
    rounds = store.load_rounds()
    text = run_page(loop.run, rounds)
    for sample in rounds[1].samples:
        n, i = sample.parent.round, sample.parent.sample
        assert parent_of(rounds, rounds[1], sample) == (n, i)
        assert f"Diff against its parent, round {n} sample {i + 1}" in text
    assert "All 3 samples of this round" in text and text.count("(kept)") == 2

    answers = ["# correct 1.6\n# best", "# correct 1.2\n# worse", "# correct 1.1\n# worse still",
               "# correct 1.3\n# again"]
    loop, store = stub_loop(tmp_path / "restart", ScriptedProposer(*answers), restart_after=2, plateau=0, rounds=4)
    loop.execute()
    rounds = store.load_rounds()
    assert [r.fresh for r in rounds] == [False, False, False, True]
    assert [parent_of(rounds, r, r.sample) for r in rounds] == [None, (1, 0), (2, 0), (1, 0)]
    assert "restarted from the best" in run_page(loop.run, rounds)


def test_a_run_that_failed_before_any_round_says_why(tmp_path):
    loop, store = stub_loop(tmp_path, ScriptedProposer(ProposerError("The endpoint said <401>.")))
    text = run_page(loop.execute(), store.load_rounds())
    assert '<span class="badge bad">no correct</span> failed, stopped by proposer' in text
    assert "No round finished." in text and "The endpoint said &lt;401&gt;." in text


def test_bench_report_has_the_curve_the_table_and_failures_by_verdict(report_sweep):
    rc, out = cli("report", "--sweep", str(report_sweep))
    page = report_sweep / "report.html"
    assert rc == 0 and out.strip() == str(page)
    text = page.read_text()
    assert "incorrect: 1 evaluation(s)" in text and "import error: 1 evaluation(s)" in text
    assert "problem error: 1 problem(s) that failed themselves" in text
    assert "this candidate fails at import" in text and "level1/3/sample_1.py" in text
    assert "level1 vs eager" in text and "level2 vs eager" not in text  # level2's one problem is broken
    # where the seconds went: level1's candidates that reached the device (level2's problem broke first)
    seconds = text.split("<h2>Seconds a candidate</h2>")[1].split("</section>")[0]
    assert "device side: start + check + time + shapes" in seconds
    assert "level1" in seconds and "level2" not in seconds
    assert "waiting for the device&#x27;s lock" in seconds  # escaped as every text on the page
    # six tables with a header row each: the levels, their seconds (11 figures, and the timings' three
    # waits for the device), the three verdicts' failures, every evaluation
    assert text.count("<tr>") == 6 + 2 + 11 + 3 + 1 + 1 + 1 + 6


def test_a_sweeps_copies_check_the_harness_on_its_page():
    """Copies are the harness's own check (sweep/summary.py's copy_check): the page says it under the overview,
    each copy read wrong and each interval that leaves out 1.0 named; a sweep without copies has no such card."""
    from harness.sweep.html import sweep_page
    from harness.sweep.records import SweepRecord

    copies = [SweepRecord("1_scale", "level1", "copy", 0, "correct", 1.001, interval=[0.995, 1.006]),
              SweepRecord("2_pid", "level1", "copy", 0, "incorrect", explanation="outputs differ"),
              SweepRecord("3_matmul", "level1", "copy", 0, "correct", 0.998, interval=[0.9963, 0.9996])]
    text = sweep_page("sweep", copies)
    card = text.split("check of itself</h2>")[1].split("</section>")[0]
    assert '<span class="badge bad">read wrong</span> 1 of 3 copies read other than correct (level1/2_pid' in card
    assert '<span class="badge warn">misses 1.0</span> 1 of 2 correct copies has' in card
    assert "level1/3_matmul: 0.9980x [0.9963-0.9996]" in card
    assert '<span class="badge ok">all hold</span> The copy read correct' in sweep_page("sweep", copies[:1])
    lost = dataclasses.replace(copies[0], read_again=1)
    assert '<span class="badge warn">ran again</span> 1 of 1 copies had a trial' in sweep_page("sweep", [lost])
    assert "check of itself" not in sweep_page("sweep", [SweepRecord("1_scale", "level1", "a.py", 0, "incorrect")])


def test_report_usage_errors_are_one_paragraph(report_run, tmp_path):
    rc, out = cli("report", "--sweep", str(tmp_path))
    assert rc == 2 and "holds no results.jsonl" in out and "Traceback" not in out
    rc, out = cli("report", str(report_run), "--sweep", str(tmp_path))
    assert rc == 2 and "one of the two" in out
    rc, out = cli("report", "nothing-like-it", "--runs-dir", str(tmp_path))
    assert rc == 2 and "No run matches" in out


# --- in a real browser --------------------------------------------------------------------------------------


def browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if not found:
        pytest.skip("no Chromium here (Debian: apt-get install chromium or chromium-headless-shell)")
    return found


def test_the_browser_tests_find_debians_headless_shell(tmp_path, monkeypatch):
    shell = tmp_path / "chromium-headless-shell"
    shell.write_text("#!/bin/sh\n")
    shell.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert browser() == str(shell)


def open_in_browser(page: Path, screenshot: Path, height: int = 1500) -> tuple[str, list[str]]:
    """The DOM Chromium built from `page`, and every console message it logged, with a screenshot taken."""
    base = [browser(), "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={screenshot.parent / 'profile'}"]
    messages = []
    outputs = []
    for extra in ([f"--screenshot={screenshot}", f"--window-size=1100,{height}"], ["--dump-dom"]):
        done = subprocess.run(base + extra + [page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        messages += [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
        outputs.append(done.stdout)
    return outputs[1], messages


def keep(screenshot: Path, name: str) -> None:
    """Where HARNESS_REPORT_SCREENSHOTS names a folder, the screenshot goes there, in few colours to stay small."""
    folder = os.environ.get("HARNESS_REPORT_SCREENSHOTS")
    if folder:
        from PIL import Image

        Path(folder).mkdir(parents=True, exist_ok=True)
        Image.open(screenshot).convert("RGB").quantize(64).save(Path(folder) / name, optimize=True)


def test_the_console_check_sees_a_script_error(tmp_path):
    """The check below can fail: a page whose script throws is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>not_defined()</script></body></html>")
    _, messages = open_in_browser(page, tmp_path / "bad.png", 200)
    assert any("Uncaught ReferenceError" in m for m in messages)


def test_run_report_in_chromium(report_run, tmp_path):
    with inside(report_run.parent.parent):
        assert cli("report", f"runs/{report_run.name}") == (0, f"runs/{report_run.name}/report.html\n")
    shot = tmp_path / "run.png"
    dom, messages = open_in_browser(report_run / "report.html", shot)
    assert messages == []
    assert "<script" not in dom.lower() and "<img" not in dom.lower()  # the payload stayed text
    assert f"<title>row_loop: run {report_run.name}</title>" in dom
    assert dom.count("<details") >= 8 and dom.count("<svg") >= 1
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep(shot, "report-run.png")


def test_bench_report_in_chromium(report_sweep, tmp_path):
    with inside(report_sweep.parent):
        assert cli("report", "--sweep", "results") == (0, "results/report.html\n")
    shot = tmp_path / "sweep.png"
    dom, messages = open_in_browser(report_sweep / "report.html", shot, 1700)
    assert messages == []
    assert "fast_p against p" in dom and "import error" in dom
    keep(shot, "report-sweep.png")
