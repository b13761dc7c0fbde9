"""The ncu parser and the findings rules, on Nsight Compute output recorded on an H100 (tests/profiles/)."""
import dataclasses
from pathlib import Path

import pytest

from harness.engine.profiling import ncu
from harness.profiles import KernelProfile, Profile
from harness.results import from_json, to_json

PROFILES = Path(__file__).parent / "profiles"


def recorded(name: str):
    return ncu.parse_raw((PROFILES / f"ncu_raw_{name}.csv").read_text())


def test_seed001_one_block_per_row_is_found():
    (k,), sm_count = recorded("seed001")
    assert sm_count == 132
    assert k.name.startswith("void layer_norm_kernel<float>")
    assert (k.grid, k.block, k.registers, k.shared_mem_bytes) == ([16, 1, 1], [256, 1, 1], 28, 3080)
    assert k.duration_us == pytest.approx(13800.448)
    assert (k.achieved_occupancy, k.theoretical_occupancy, k.occupancy_limiters) == (12.5, 100.0, [])
    assert (k.dram_pct, k.sm_pct, k.l2_hit_pct) == (1.78, 0.65, 28.35)
    assert k.sectors_per_request == 4.0 and k.bytes_per_sector == 32.0
    assert [s.reason for s in k.stalls] == ["long_scoreboard", "wait", "short_scoreboard"]
    assert k.bottleneck == "latency"
    assert ncu.idle_sms(k, 132) == "grid of 16 blocks on 132 SMs: 88% of SMs idle"
    assert ncu.findings([k], 132)[0] == "grid of 16 blocks on 132 SMs: 88% of SMs idle"
    assert ncu.uncoalesced(k, 132) is None and ncu.bank_conflicts(k, 132) is None
    assert ncu.occupancy_limit(k, 132) is None


def test_shipped_kernel_is_memory_bound_with_its_occupancy_limits():
    (k,), _ = recorded("kernel")
    assert k.grid == [132, 1, 1] and k.bottleneck == "memory"
    assert ncu.idle_sms(k, 132) is None
    assert ncu.bound(k, 132) == "DRAM at 61% of peak: memory-bound"
    assert ncu.occupancy_limit(k, 132) == "register count and shared memory limit occupancy to 25%"
    assert ncu.bank_conflicts(k, 132) == "bank conflicts in shared memory: 13% of shared-memory wavefronts"


def test_reference_register_limit_and_sector_use():
    (k,), _ = recorded("reference")
    assert ncu.occupancy_limit(k, 132) == "register count limits occupancy to 75%"
    assert ncu.uncoalesced(k, 132) == "uncoalesced global loads: 16.0 sectors per request, 13 of each sector's 32 bytes used"


def test_classification_rules():
    (k,), _ = recorded("kernel")
    assert ncu.classify(dataclasses.replace(k, duration_us=3.0)) == "launch"
    assert ncu.classify(dataclasses.replace(k, dram_pct=20.0, sm_pct=75.0)) == "compute"
    assert ncu.classify(dataclasses.replace(k, dram_pct=70.0, sm_pct=80.0)) == "compute"
    assert ncu.bound(dataclasses.replace(k, bottleneck="launch", duration_us=3.0), 132).startswith("3.0 us: launch-bound")


def test_json_round_trip():
    kernels, sm_count = recorded("kernel")
    profile = Profile("ncu", kernels, sm_count, ncu.findings(kernels, sm_count))
    assert from_json(Profile, to_json(profile)) == profile


def test_heaviest_keeps_the_kernels_that_take_90_percent():
    k = KernelProfile("a", 80.0)
    kernels = [dataclasses.replace(k, name="small", duration_us=5.0), k,
               dataclasses.replace(k, name="b", duration_us=15.0)]
    assert [x.name for x in ncu.heaviest(kernels)] == ["a", "b"]


def test_output_without_a_table_is_a_clear_error():
    with pytest.raises(ncu.ProfileParseError, match="ERR_NVGPUCTRPERM"):
        ncu.parse_raw("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n", "x.csv")
