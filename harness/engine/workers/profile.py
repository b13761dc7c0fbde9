"""The profile role: one forward of the candidate (or the reference) for a profiler.

Run as `python -m harness.engine.workers profile SPEC.json`, under ncu, under perf or alone.
One warm forward first, so that ncu's window (cudaProfilerStart..Stop) holds only
the measured forward's kernels; without ncu, torch.profiler records that forward
and its trace, parsed by torch_trace.py into per-kernel (on CPU, per-op) rows,
goes to the spec's `out` file. Under perf (the spec's `sample`), the forward is then
called again and again for a while with perf's events on (../profiling/perf.py).
"""
from __future__ import annotations

import json
import time

import torch

from ...profiles import Profile, Sampling
from ...results import to_json
from ..building.extensions import key_builds
from ..profiling.torch_trace import parse_trace
from .common import (build_model, copy_parameters, import_file, inputs_from_seed, randomize_parameters, settle,
                     sync)


def profile_role(spec: dict) -> None:
    device = torch.device(spec["device"])
    settle(device)
    problem = import_file(spec["problem"], "problem")
    init_args = list(problem.get_init_inputs())
    model = build_model(problem.Model, init_args, spec["init_seed"], device)
    randomize_parameters(model, spec["param_seed"])
    if spec.get("candidate"):
        reference = model
        key_builds()  # finds the extension where its evaluation built it
        model = build_model(import_file(spec["candidate"], "candidate").ModelNew, init_args, spec["init_seed"], device)
        copy_parameters(reference, model)
    model = model.to(device).eval()
    inputs = inputs_from_seed(problem, device, spec["seed"])
    on_gpu = device.type == "cuda"
    with torch.no_grad():
        model(*inputs)  # warm: builds, autotuning and caches stay out of the profile
        sync(device)
        if spec["tool"] == "ncu":
            torch.cuda.cudart().cudaProfilerStart()
            model(*inputs)
            sync(device)
            torch.cuda.cudart().cudaProfilerStop()
            return
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
        with torch.profiler.profile(activities=activities) as prof:
            model(*inputs)
            sync(device)
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count if on_gpu else None
    trace = spec["out"] + ".trace.json"
    prof.export_chrome_trace(trace)
    with open(trace) as f:
        events = json.load(f).get("traceEvents", [])
    profile = Profile("torch" if on_gpu else "torch-cpu", parse_trace(events, on_gpu), sm_count)
    if spec.get("sample"):
        with torch.no_grad():
            profile.sampling = sampled_calls(lambda: model(*inputs), device, spec["sample"])
    with open(spec["out"], "w") as f:
        f.write(to_json(profile))


def sampled_calls(call, device: torch.device, sample: dict) -> Sampling:
    """Calls for `sample["seconds"]` or more with perf's events on: perf, this process's parent,
    reads `control` and acknowledges each command on `ack` once it took effect."""
    with open(sample["control"], "w") as control, open(sample["ack"]) as ack:
        def tell(command: str) -> None:
            control.write(command + "\n")
            control.flush()
            ack.readline()

        tell("enable")
        # in batches that double, so that reading the clock is no share of the samples: at most twice the time
        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < sample["seconds"]:
            for _ in range(calls + 1):
                call()
            calls += calls + 1
        sync(device)
        seconds = time.perf_counter() - started
        tell("disable")
    return Sampling(calls=calls, seconds=seconds, threads=torch.get_num_threads())
