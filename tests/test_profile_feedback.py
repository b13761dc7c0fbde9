"""Profiles in the loop's feedback, from Nsight Compute output recorded on an H100 and a torch
profiler trace recorded on a CPU (tests/profiles/), and the torch trace parser."""
import dataclasses
import json
from pathlib import Path

import pytest

from harness import Prompts
from harness.engine.profiling import ncu
from harness.engine.profiling.torch_trace import cpu_ops, gpu_kernels
from harness.loop.feedback import feedback_text
from harness.loop.profile_text import fallback_note, profile_lines
from harness.profiles import Profile

from test_feedback import T, correct, incorrect

PROFILES = Path(__file__).parent / "profiles"


def recorded_ncu(*names: str) -> Profile:
    kernels, sm_count = [], None
    for name in names:
        found, sm_count = ncu.parse_raw((PROFILES / f"ncu_raw_{name}.csv").read_text())
        kernels += found
    return Profile("ncu", kernels, sm_count, ncu.findings(kernels, sm_count), seconds=14.0)


def cpu_trace() -> list[dict]:
    return json.loads((PROFILES / "torch_cpu_trace.json").read_text())["traceEvents"]


def test_feedback_carries_the_ncu_table_and_findings():
    result = correct(1.2)
    result.profile = recorded_ncu("seed001")
    text = feedback_text(Prompts(), 1, result, T, [])
    assert "Profile of one forward (Nsight Compute): the kernels that take 90% of its time (1 of 1):" in text
    assert "| kernel | grid | block | ms | regs | occupancy | DRAM / SM | class |" in text
    assert "| layer_norm_kernel<float> | 16x1x1 | 256x1x1 | 13.8 | 28 | 12% (100%) | 2% / 1% | latency |" in text
    assert "- grid of 16 blocks on 132 SMs: 88% of SMs idle" in text
    assert "latency-bound; warps mostly stall on long_scoreboard" in text
    assert text.index("Findings:") < text.index("is below the acceptable")  # before the advice
    assert "14.0" not in text  # the profile's cost is for the person, not the model


def test_table_is_cut_to_the_kernels_that_take_90_percent():
    lines = profile_lines(recorded_ncu("seed001", "reference", "kernel"))
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(("| kernel", "| ---"))]
    assert [row.split(" | ")[0] for row in rows] == ["| layer_norm_kernel<float>",
                                                     "| unnamed>::vectorized_layer_norm_kernel<float, float, 0>"]
    assert "(1 more, 0.271 ms in all, not shown)" in lines
    # with several kernels shown, each finding names its kernel
    assert "- layer_norm_kernel<float>: grid of 16 blocks on 132 SMs: 88% of SMs idle" in lines


def test_no_profile_block_for_an_incorrect_candidate_and_a_failed_profile_says_why():
    result = incorrect()
    result.profile = recorded_ncu("seed001")
    assert "Profile" not in feedback_text(Prompts(), 1, result, T, [])
    failed = Profile("none", note="no profile: the profile of x.py ran past its 300 s limit and was killed.")
    assert profile_lines(failed) == [f"Profile: {failed.note}"]


def test_cpu_trace_gives_each_ops_self_time():
    ops = {k.name: k.duration_us for k in cpu_ops(cpu_trace())}
    # aten::mean (368.218 us) called aten::sum (42.503) and aten::div_ (278.555)
    assert ops["aten::mean"] == pytest.approx(368.218 - 42.503 - 278.555)
    # aten::var and aten::add are called twice each, and the calls' self times add up
    assert ops["aten::add"] == pytest.approx(20.45 - 9.885 + 3.655)
    assert {"aten::sub", "aten::rsqrt", "aten::mul", "aten::copy_"} <= set(ops)
    assert all(us > 0 for us in ops.values())


def test_cpu_fallback_table_leaves_out_what_the_trace_lacks():
    kernels = cpu_ops(cpu_trace())
    lines = profile_lines(Profile("torch-cpu", kernels, findings=ncu.findings(kernels, None)))
    assert lines[0].startswith("Profile of one forward (torch profiler, CPU ops): the ops (self time) that take 90%")
    assert lines[1] == "| kernel | ms |"
    assert any(line.startswith("| aten::_to_copy | ") for line in lines)  # the longest by self time
    assert "Findings:" not in lines


# Kernel events in the form Kineto writes them (libkineto's output_json.cpp); the profiler here has no GPU.
KINETO_KERNELS = [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 90.0, "dur": 4.0,
     "args": {"correlation": 7}},
    {"ph": "X", "cat": "kernel", "name": "void ln_rows<float>(const float *, float *, int)", "pid": 0, "tid": 7,
     "ts": 100.0, "dur": 812.5, "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 7,
                                          "registers per thread": 40, "shared memory": 2048, "blocks per SM": 0.12,
                                          "warps per SM": 0.97, "grid": [16, 1, 1], "block": [256, 1, 1],
                                          "est. achieved occupancy %": 2}},
    {"ph": "X", "cat": "kernel", "name": "void fill<float>(float *)", "pid": 0, "tid": 7, "ts": 950.0, "dur": 3.0,
     "args": {"registers per thread": 16, "shared memory": 0, "grid": [1, 1, 1], "block": [128, 1, 1],
              "est. achieved occupancy %": 0}},
]


def test_gpu_kernel_events_give_grid_block_registers_and_occupancy():
    main, small = gpu_kernels(KINETO_KERNELS)
    assert (main.grid, main.block, main.registers, main.shared_mem_bytes, main.achieved_occupancy) == (
        [16, 1, 1], [256, 1, 1], 40, 2048, 2.0)
    assert main.duration_us == 812.5 and main.bottleneck == ""
    assert small.bottleneck == "launch"  # 3 us
    assert "grid of 16 blocks on 132 SMs: 88% of SMs idle" in ncu.findings([main, small], 132)


def test_why_there_is_no_ncu_profile_is_said_once():
    note = "ncu (Nsight Compute) is not installed: per-kernel times from the torch profiler instead"
    first, second = correct(1.1), correct(1.2)
    first.profile = Profile("torch", note=note)
    second.profile = dataclasses.replace(first.profile)
    assert fallback_note([first], []) == note
    assert fallback_note([second], [first]) == ""
    assert fallback_note([correct(1.0)], []) == ""  # not profiled
    assert fallback_note([dataclasses.replace(second, profile=Profile("ncu", note=""))], []) == ""
