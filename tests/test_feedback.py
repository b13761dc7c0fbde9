"""Feedback text: verdict, errors cut to what matters, times, thresholds, history."""
import re

from harness.loop.feedback import (Past, Thresholds, advice, compiler_errors, feedback_context, feedback_text,
                                   headline, history_table, stalled)
from harness import BuildResult, CheckResult, EvalResult, Prompts, Roofline, Timing, Verdict

T = Thresholds(accept=1.5, target=2.0)


def timing(ms: float) -> Timing:
    return Timing(median=ms, iqr=ms / 50, mean=ms, min=ms * 0.9, n=40, rel_se=0.004, method="cuda_events")


def correct(speedup: float) -> EvalResult:
    return EvalResult(Verdict.CORRECT, f"{Verdict.CORRECT.sentence} Candidate ...",
                      check=CheckResult(True, trials=5, max_abs_error=1e-6),
                      timings={"candidate": timing(8.17 / speedup), "reference": timing(8.17)},
                      speedup=speedup)


def compile_error() -> EvalResult:
    group = ["main.cu:20:9: error: expected ';' before 'double'", "   20 |   double inv = 1.0;"]
    return EvalResult(Verdict.COMPILE_ERROR,
                      f"{Verdict.COMPILE_ERROR.sentence} First errors:\n" + "\n".join(group) + "\nFull log: x",
                      build=BuildResult(ok=False, seconds=3.0, first_errors=group + group))


def incorrect() -> EvalResult:
    reason = "the output differs in 10 of 4096 elements (0.24%); first at index [0, 3]"
    return EvalResult(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} Trial 2: {reason}.",
                      check=CheckResult(False, trials=2, max_abs_error=0.5, max_rel_error=2.0,
                                        mismatch_share=0.0024, first_bad_index=[0, 3],
                                        failed_trial=2, reasons=[reason]))


def test_compiler_errors_are_shown_once():
    lines = compiler_errors(compile_error())
    assert lines == ["main.cu:20:9: error: expected ';' before 'double'", "   20 |   double inv = 1.0;"]
    context = feedback_context(1, compile_error(), T, [])
    assert context["compiler_errors"] == lines
    assert "First errors" not in context["explanation"]  # not repeated outside the block


def test_incorrect_shows_the_mismatch_and_the_failing_trial():
    context = feedback_context(1, incorrect(), T, [])
    assert context["correctness"][0].startswith("the output differs in 10 of 4096")
    assert "failed on trial 2" in context["correctness"]
    assert context["explanation"] == "" and context["speedup"] is None


def test_advice_follows_the_thresholds():
    assert "different strategy" in advice(correct(0.61), T, None)
    assert "slower than the reference" in advice(correct(0.61), T, None)
    assert "short of the target 2.0x" in advice(correct(1.7), T, None)
    assert "task is done" in advice(correct(2.3), T, None)
    assert "Best so far: round 2 at 1.80x" in advice(compile_error(), T, (2, 1.8))
    assert "Best so far" not in advice(correct(1.9), T, (2, 1.8))


def test_text_has_times_speedup_thresholds_and_history():
    history = [Past(1, compile_error()), Past(2, incorrect(), "Two | passes")]
    text = feedback_text(Prompts(), 3, correct(1.2), T, history, "One pass.")
    assert text.startswith("## Round 3: correct")
    assert "- candidate: 6.808 ms" in text and "- reference: 8.17 ms" in text
    assert "Speedup: 1.20x over eager PyTorch (acceptable: 1.5x, target: 2.0x)" in text
    assert "| 1 | compile_error | - | - | - |  |" in text
    assert "| 2 | incorrect | - | - | - | Two / passes |" in text
    assert "| 3 | correct | 1.20x | 6.808 | 8.17 | One pass. |" in text


def test_gpu_times_name_the_host_submit():
    result = correct(1.2)
    result.timings["candidate"].submit_median = 0.113
    text = feedback_text(Prompts(), 1, result, T, [])
    assert "- candidate: 6.808 ms (IQR 0.14 ms, 40 samples; host submit 0.11 ms)" in text
    assert "- reference: 8.17 ms (IQR 0.16 ms, 40 samples)" in text  # none recorded: none shown


def test_no_code_feedback_says_exactly_that():
    result = EvalResult(Verdict.NO_CODE, "The answer holds no fenced Python code block.")
    text = feedback_text(Prompts(), 1, result, T, [])
    assert "## Round 1: no_code" in text and "holds no fenced Python code block" in text


def test_history_table_keeps_the_latest_rows_and_the_best():
    rows = history_table([Past(n, correct(1.0 + n / 100)) for n in range(1, 31)]).splitlines()
    assert rows[2] == "| 1-18 | (18 earlier rounds) | | | | |"
    assert rows[-1].startswith("| 30 | correct | 1.30x")
    history = [Past(n, correct(3.0 if n == 2 else 1.0 + n / 100), f"idea {n}") for n in range(1, 31)]
    rows = history_table(history).splitlines()
    assert rows[2] == "| 1-18 | (17 earlier rounds) | | | | |"
    assert rows[3].startswith("| 2 | correct | 3.00x") and rows[3].endswith("| idea 2 |")


def test_noise_is_not_called_a_change():
    best = [Past(1, correct(1.63))]
    assert "No measurable change from round 1's 1.63x" in feedback_text(Prompts(), 2, correct(1.65), T, best)
    assert "A measurable gain over round 1's 1.63x" in feedback_text(Prompts(), 2, correct(1.8), T, best)
    text = feedback_text(Prompts(), 2, correct(1.3), T, best)
    assert "beyond the noise: continue from round 1's candidate" in text


def test_stalled_counts_rounds_since_the_last_measurable_gain():
    speeds = [None, 1.2, 1.5, 1.51, None, 1.49, 1.6]
    history = [Past(n, correct(s) if s else compile_error()) for n, s in enumerate(speeds, 1)]
    assert [stalled(history[:k]) for k in range(1, 8)] == [0, 0, 0, 1, 2, 3, 0]


def test_headline_is_one_line():
    assert headline(correct(2.5)) == "2.50x"
    assert headline(compile_error()).startswith("main.cu:20:9: error")
    assert headline(incorrect()).startswith("the output differs")


def test_feedback_gives_the_roofline_and_build_time_and_leaves_out_harness_warnings():
    result = correct(1.2)
    result.roofline = Roofline(bytes=10**9, floor_ms=0.34, achieved_gbs=1469.0, bandwidth_share=0.5)
    result.build = BuildResult(ok=True, seconds=9.46)
    result.warnings = ["static check: calls F.layer_norm", "the problem's outputs are nearly constant",
                       "the reference ran 1.20x slower beside the candidate than alone (1 ms vs 0.8 ms)"]
    text = feedback_text(Prompts(), 1, result, T, [], hidden=frozenset({"the problem's outputs are nearly constant"}))
    assert "- Roofline: 1469 GB/s = 50% of the measured peak (floor 0.34 ms)" in text
    assert "- Build: 9.5 s" in text and "static check: calls F.layer_norm" in text
    assert "nearly constant" not in text and "slower beside" not in text


def test_backward_feedback_gives_each_pass_its_time():
    result = correct(2.0)
    result.backward = True
    result.timings |= {"candidate_forward": timing(1.5), "reference_forward": timing(3.0)}
    text = feedback_text(Prompts(), 1, result, T, [])
    assert ("- candidate by pass: forward 1.5 ms, backward about 2.585 ms (forward and backward 4.085 ms, timed as "
            "one call") in text, text
    assert "- reference by pass: forward 3 ms, backward about 5.17 ms" in text
    assert "by pass" not in feedback_text(Prompts(), 1, correct(2.0), T, [])  # forward only: no split


# --- a CPU run speaks CPU ------------------------------------------------------

GPU_WORDS = re.compile(r"GPU|CUDA|warp|occupancy|shared memory|on chip|launch|coalesc|stream|blocks", re.I)


def test_cpu_feedback_sample_directions_and_prompts_use_no_gpu_words():
    from harness.loop import search
    from harness.loop.prompts import system_prompt

    for verdict in Verdict:
        for speedup in (0.8, 1.6):
            result = EvalResult(verdict=verdict, speedup=speedup if verdict is Verdict.CORRECT else None,
                                explanation="x")
            said = advice(result, Thresholds(1.5, 2.0), None, cpu=True)
            assert not GPU_WORDS.search(said), said
    slow = advice(EvalResult(verdict=Verdict.CORRECT, speedup=0.8, explanation=""), Thresholds(1.5, 2.0), None, cpu=True)
    assert "SIMD" in slow and "cache" in slow
    assert "over the GPU" in advice(EvalResult(verdict=Verdict.CORRECT, speedup=0.8, explanation=""), Thresholds(1.5, 2.0), None)
    for n in range(1, 5):
        cpu = search.direction(n, 0, 4, cpu=True)
        assert cpu and not GPU_WORDS.search(cpu) and cpu in search.CPU_DIRECTIONS
        assert search.direction(n, 0, 4) in search.DIRECTIONS
    assert not GPU_WORDS.search(system_prompt(Prompts(), cpu=True))
