"""harness: propose, build, check and time custom kernels against a PyTorch reference.

The public API, by name. Each name is imported on first use (PEP 562), so
`import harness` stays cheap: no torch, rich or openai until a name needs them.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

# name -> the module that defines it
_API = {
    "HarnessError": "harness.errors",
    "Verdict": "harness.results", "BuildResult": "harness.results", "CheckResult": "harness.results",
    "Timing": "harness.results", "EvalResult": "harness.results", "Environment": "harness.results",
    "Roofline": "harness.results", "Baseline": "harness.results", "speedup_text": "harness.results",
    "Tokens": "harness.tokens", "to_json": "harness.results", "from_json": "harness.results",
    "to_dict": "harness.results", "from_dict": "harness.results",
    "Problem": "harness.problem", "ProblemError": "harness.problem", "load_problem": "harness.problem",
    "DeviceInfo": "harness.device", "describe": "harness.device", "default_device": "harness.device",
    "evaluate": "harness.engine.evaluate", "Evaluator": "harness.engine.evaluate",
    "EvalOptions": "harness.engine.options",
    "evaluate_batch": "harness.engine.pool", "Pool": "harness.engine.pool",
    "RunStore": "harness.runs.store", "Run": "harness.runs.records", "Round": "harness.runs.records",
    "StoreError": "harness.runs.store", "Settings": "harness.runs.settings",
    "replay": "harness.runs.history", "promote": "harness.runs.history", "HistoryError": "harness.runs.history",
    "plot": "harness.runs.plot", "run_page": "harness.runs.html", "sweep_page": "harness.sweep.html",
    "evaluate_many": "harness.sweep.batch", "Judge": "harness.sweep.batch", "Request": "harness.sweep.batch",
    "SweepRecord": "harness.sweep.records", "read_records": "harness.sweep.records",
    "AuditRecord": "harness.sweep.audit", "audit": "harness.sweep.audit",
    "Loop": "harness.loop.loop", "Prompts": "harness.loop.prompts",
    "main": "harness.cli.main",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from .cli.main import main
    from .device import DeviceInfo, default_device, describe
    from .engine.evaluate import Evaluator, evaluate
    from .engine.options import EvalOptions
    from .engine.pool import Pool, evaluate_batch
    from .errors import HarnessError
    from .loop.loop import Loop
    from .loop.prompts import Prompts
    from .problem import Problem, ProblemError, load_problem
    from .results import (Baseline, BuildResult, CheckResult, Environment, EvalResult, Roofline, Timing, Verdict,
                          from_dict, from_json, speedup_text, to_dict, to_json)
    from .runs.history import HistoryError, promote, replay
    from .runs.html import run_page
    from .runs.plot import plot
    from .runs.records import Round, Run
    from .runs.settings import Settings
    from .runs.store import RunStore, StoreError
    from .sweep.audit import AuditRecord, audit
    from .sweep.batch import Judge, Request, evaluate_many
    from .sweep.html import sweep_page
    from .sweep.records import SweepRecord, read_records
    from .tokens import Tokens
