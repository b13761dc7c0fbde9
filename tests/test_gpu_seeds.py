"""The recorded answers in tests/seeds, evaluated on a GPU against layernorm_4d.

Speed is not asserted here (bench/ measures it); set HARNESS_GPU_REPORT to a
path to collect each result as JSON lines for the record.
"""
import json
import os

import pytest

from conftest import REPO, SEEDS
from harness import EvalOptions, Evaluator, Verdict, to_dict
from harness.loop.extract import Extraction, extract

LAYERNORM = REPO / "problems" / "layernorm_4d.py"


def seed_answer(number: int) -> str:
    (path,) = SEEDS.glob(f"{number:03d}_*.txt")
    return path.read_text()


def record(name: str, result) -> None:
    report = os.environ.get("HARNESS_GPU_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps({"name": name, **to_dict(result)}) + "\n")


@pytest.fixture(scope="module")
def gpu_evaluator(cache_dir):
    with Evaluator(LAYERNORM, EvalOptions(device="cuda", cache_dir=cache_dir)) as ev:
        yield ev


def evaluate_seed(evaluator, number, tmp_path):
    extracted = extract(seed_answer(number))
    assert extracted.status is Extraction.OK
    path = tmp_path / f"seed_{number:03d}.py"
    path.write_text(extracted.code)
    result = evaluator.evaluate(path)
    record(f"seed {number:03d}", result)
    return result


@pytest.mark.gpu
def test_seed_000_names_the_unknown_keyword(gpu_evaluator, tmp_path):
    result = evaluate_seed(gpu_evaluator, 0, tmp_path)
    assert result.verdict in (Verdict.IMPORT_ERROR, Verdict.COMPILE_ERROR)
    assert "extra_cuda_flags" in result.explanation


@pytest.mark.gpu
@pytest.mark.parametrize("number", [1, 2])
def test_seeds_001_002_are_correct_and_timed(gpu_evaluator, tmp_path, number):
    result = evaluate_seed(gpu_evaluator, number, tmp_path)
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert result.check.trials >= 5
    for name in ("candidate", "reference"):
        assert result.timings[name].method == "cuda_events"
        assert result.timings[name].n >= 10
    assert result.speedup > 0
    # seed 001's forward cannot be captured in a CUDA graph; the failed capture must leave the
    # device's random draws working for the checks at other shapes that follow it
    assert result.shapes and not any("drawing the trial's inputs" in check.reason for check in result.shapes), \
        result.shapes


@pytest.mark.gpu
def test_seed_003_names_the_missing_cpp_sources(gpu_evaluator, tmp_path):
    result = evaluate_seed(gpu_evaluator, 3, tmp_path)
    assert result.verdict in (Verdict.IMPORT_ERROR, Verdict.COMPILE_ERROR)
    assert "cpp_sources" in result.explanation


def test_seed_004_has_no_code_block():
    assert extract(seed_answer(4)).status is Extraction.NO_CODE
