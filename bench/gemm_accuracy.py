"""GEMM + bias + ReLU kernels against a float64 product: error, its bias, and time.

    python bench/gemm_accuracy.py kernels/gemm_bias_relu.py [OTHER.py ...]

Shows what the harness's fp32 check only samples: how far each kernel is from the exact
result next to cuBLAS's fp32 SGEMM (TF32 off), and whether the error leans one way (the
tensor core's truncating accumulation does).  The kernels run in this process: use it for
your own files, not for untrusted candidates.
"""
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

M = N = K = 8192


class Reference(torch.nn.Module):
    """The problem's Model: relu(linear(x)), through cuBLAS."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(K, N)

    def forward(self, x):
        return torch.relu(self.linear(x))


def load(path: str) -> torch.nn.Module:
    started = time.monotonic()
    if not Path(path).is_file():
        sys.exit(f"{path}: no such file; give GEMM + bias + ReLU kernel files (like kernels/gemm_bias_relu.py).")
    spec = importlib.util.spec_from_file_location(path.replace("/", "_").removesuffix(".py"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "ModelNew"):
        sys.exit(f"{path} defines no ModelNew: it must take (in_features, out_features) and keep its "
                 "parameters as linear.weight and linear.bias, as kernels/gemm_bias_relu.py does.")
    print(f"built {path} in {time.monotonic() - started:.1f} s", flush=True)
    return module.ModelNew(K, N).cuda()


def milliseconds(fn, x) -> float:
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("bench/gemm_accuracy.py needs a CUDA GPU: the kernels and the float64 product run there.")
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    models = {path: load(path) for path in sys.argv[1:]}
    models["cuBLAS fp32 (TF32 off)"] = Reference().cuda()
    for trial in range(3):
        gen = torch.Generator(device="cuda").manual_seed(1000 + trial)
        x = torch.randn(M, K, device="cuda", generator=gen)
        w = (torch.rand(N, K, device="cuda", generator=gen) * 2 - 1) / K ** 0.5
        b = (torch.rand(N, device="cuda", generator=gen) * 2 - 1) / K ** 0.5
        with torch.no_grad():
            truth = torch.relu(x.double() @ w.double().T + b.double())
            for name, model in models.items():
                model.linear.weight.copy_(w)
                model.linear.bias.copy_(b)
                error = model(x).double() - truth
                over = (error.abs() > 1e-4 + 1e-4 * truth.abs()).sum().item()
                print(f"trial {trial}  {name:40s} max |error| {error.abs().max().item():.2e}  "
                      f"mean error where y > 0 {error[truth > 0].mean().item():+.2e}  "
                      f"over atol=rtol=1e-4: {over}", flush=True)
                if trial == 0:
                    print(f"         {name:40s} {milliseconds(model, x):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
