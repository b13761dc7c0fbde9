# Lower precision without a flag (GPU): a Triton GEMM whose tl.dot on float32 runs in TF32 (Triton's default).
# invariant: precision
# problem: tests/problems/matmul_mean.py
# device: cuda
# expect: incorrect "further from the reference computed in float64"
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gemm(x_ptr, w_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K))
        b = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None], mask=(rn[None, :] < N) & ((k + rk)[:, None] < K))
        acc += tl.dot(a, b)  # float32 operands: TF32 unless input_precision="ieee"
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        x = x.contiguous()
        w = self.proj.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty(M, N, device=x.device, dtype=torch.float32)
        _gemm[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, w, y, M, N, K, BM=64, BN=64, BK=32)
        return y.mean(dim=-1)
