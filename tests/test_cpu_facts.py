"""What describe_problem tells of a CPU: its model and vector extensions (/proc/cpuinfo's), the peaks
measured on the timing's one thread, and the problem's roofline floor."""
from contextlib import closing
from pathlib import Path

import pytest

from harness.agent.judge import Judge
from harness.device import parse_cpuinfo
from harness.engine.options import EvalOptions
from harness.results import to_dict
from harness.runs.settings import Evaluation

REPO = Path(__file__).parent.parent
ROOFLINE = "tests/problems/small_layernorm_roofline.py"  # declares its bytes and flops
SMALL = "tests/problems/small_layernorm.py"
CPUINFO = Path("/proc/cpuinfo")

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c avx2 fma avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""
ARM = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp sve sve2 i8mm bf16
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""


def test_the_cpus_model_and_vector_extensions_are_read_from_cpuinfo():
    intel = parse_cpuinfo(X86)
    assert intel.name == "Intel(R) Xeon(R) Platinum 8480+"
    assert intel.extensions == ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16",
                                "amx_tile", "amx_bf16", "amx_int8"]
    arm = parse_cpuinfo(ARM)
    assert arm.extensions == ["neon (asimd)", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm"]
    assert arm.name  # no model name there: the machine's architecture stands in
    assert parse_cpuinfo("").extensions == []


def field(name: str) -> str:
    """The first processor's `name` field in this machine's /proc/cpuinfo, read apart from the harness's parser."""
    for line in CPUINFO.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


@pytest.mark.skipif(not CPUINFO.is_file(), reason="no /proc/cpuinfo: not Linux")
def test_describe_problem_on_a_cpu_names_the_cpu_its_vector_extensions_peaks_and_floor(cache_dir, tmp_path):
    options = EvalOptions(device="cpu", cache_dir=cache_dir, trials=2, time_cap=0.5)
    with closing(Judge(options, Evaluation(trials=2, time_cap=0.5), [REPO], tmp_path / "runs")) as judge:
        described = judge.describe(ROOFLINE)
    model = field("model name")
    if model:
        assert described.environment.device_name == model and f"- Device: {model} (CPU)" in described.text
    flags = set((field("flags") or field("Features")).split())
    expected = ([f for f in ("sse4_2", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "sve") if f in flags]
                + (["neon (asimd)"] if "asimd" in flags else []))
    shown = next(line for line in described.hardware if line.startswith("vector extensions: "))
    assert expected and all(f in shown.split(": ")[1].split(", ") for f in expected), shown
    assert f"- {shown}" in described.text
    peaks = described.peaks
    assert peaks.bandwidth_gbs > 0 and peaks.tflops_fp32 > 0 and peaks.threads == 1
    assert described.headroom.roofline.floor_ms > 0 and described.ceiling > 0
    assert "Measured here on 1 thread, as the timing runs: " in described.text
    assert f"(floor {described.headroom.roofline.floor_ms:.4g} ms)" in described.text
    record = to_dict(described)  # the tool's structured answer
    assert record["peaks"]["threads"] == 1 and record["headroom"]["roofline"]["floor_ms"] > 0


def test_describe_problems_reference_is_the_figure_later_evaluations_read_alone(cache_dir, tmp_path):
    """describe_problem's time of the reference alone is the one the problem's evaluations share: the first
    evaluation times it again with its twins, and from then on describe_problem gives that figure and the
    next evaluation reads it alone too (describe_problem once read 1.224 ms where every evaluation read
    0.37-0.57)."""
    options = EvalOptions(device="cpu", cache_dir=cache_dir, time_cap=0.5, trials=2)
    candidate = str(REPO / "tests" / "candidates" / "py_correct.py")
    with closing(Judge(options, Evaluation(trials=2, time_cap=0.5), [REPO], tmp_path / "runs")) as judge:
        judge.describe(SMALL)
        first = judge.evaluate(SMALL, path=candidate).result
        described = judge.describe(SMALL).reference["host"].median
        second = judge.evaluate(SMALL, path=candidate).result
    assert first.verdict.value == second.verdict.value == "correct", (first.explanation, second.explanation)
    assert described == first.reference_alone_ms
    if "retimed_for_gap" not in second.details:  # shared, unless a gap had it timed afresh
        assert second.reference_alone_ms == described and second.details["reference_alone_age_s"] >= 0
