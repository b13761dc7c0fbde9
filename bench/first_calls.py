"""What a fresh CUDA process pays for its first matmul, convolution and elementwise calls, and what
calls made before them move (docs/throughput.md, workers/warm.py). Each variant runs in a fresh
interpreter, twice: "cold" (the context only), "handles" (cuBLAS's handle made and cuDNN loaded
first), "tiny" (a tiny matmul and convolution first). Prints milliseconds per call, a line a run.

    python bench/first_calls.py
"""
import subprocess
import sys

CODE = r'''
import json, sys, time, torch
mode, t = sys.argv[1], {}

def now():
    torch.cuda.synchronize()
    return time.perf_counter()

def timed(name, call):
    start = now()
    call()
    t[name] = now() - start

timed("context", lambda: torch.empty(1, device="cuda"))
if mode in ("handles", "tiny"):
    timed("w.blas_handle", torch.cuda.current_blas_handle)
    timed("w.cudnn_lib", torch.backends.cudnn.version)
if mode == "tiny":
    a = torch.randn(8, 8, device="cuda")
    timed("w.tiny_mm", lambda: a @ a)
    x, w = torch.randn(1, 3, 8, 8, device="cuda"), torch.randn(4, 3, 3, 3, device="cuda")
    timed("w.tiny_conv", lambda: torch.nn.functional.conv2d(x, w))
A, B = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, 4096, device="cuda")
for n in (1, 2):
    timed(f"mm{n}", lambda: A @ B)
conv, y = torch.nn.Conv2d(64, 128, 3, device="cuda"), torch.randn(16, 64, 128, 128, device="cuda")
for n in (1, 2):
    timed(f"conv{n}", lambda: conv(y))
for n in (1, 2):
    timed(f"relu{n}", lambda: torch.relu(A))
for n in (1, 2):
    timed(f"sum{n}", lambda: A.sum())
print(json.dumps({k: round(v * 1000, 1) for k, v in t.items()}))
'''

if __name__ == "__main__":
    for _ in range(2):
        for mode in ("cold", "handles", "tiny"):
            out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True)
            print(mode, out.stdout.strip() or out.stderr[-2000:], flush=True)
