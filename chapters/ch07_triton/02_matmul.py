"""The tiled GEMM: each program computes one BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K
steps and accumulating in float32. On the interpreter autotune has one small config; on a GPU it
times a dozen and keeps the fastest per (M, N, K).

    python chapters/ch07_triton/02_matmul.py
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import torch

from chapters.ch07_triton.bench import bench_ms
from chapters.ch07_triton.check import passes, poisoned, rel_err
from chapters.ch07_triton.matmul import linear, matmul, matmul_kernel


def main() -> None:
    torch.manual_seed(0)
    # (M, N, K): a decode step's projection (M=1), a non-multiple of every block size, an MLP shape.
    for dtype in (torch.float32, torch.bfloat16):
        for m, n, k in [(1, 576, 576), (37, 45, 70), (16, 1536, 64)]:
            a = torch.randn(m, k, device=KERNEL_DEVICE).to(dtype)
            w = torch.randn(n, k, device=KERNEL_DEVICE).to(dtype)  # a linear layer's weight [N, K]
            out = matmul(a, w.t(), out=poisoned((m, n), dtype, KERNEL_DEVICE))  # w.t(): a view, no copy
            err = rel_err(out, a.double() @ w.double().t())
            print(f"{str(dtype):15s} M={m:3d} N={n:5d} K={k:4d}: rel err {err:.1e} "
                  f"({'ok' if passes(err, dtype, uses_dot=True) else 'FAIL'})  config {matmul_kernel.best_config.kwargs}")
    x, w, r = (torch.randn(*s, device=KERNEL_DEVICE) for s in [(2, 3, 40), (24, 40), (2, 3, 24)])
    err = rel_err(linear(x, w, residual=r), x.double() @ w.double().t() + r.double())
    print(f"linear with the residual added in the epilogue: rel err {err:.1e}")
    if not INTERPRET:
        for s in (1024, 4096):
            a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
            for name, fn in [("triton", lambda: matmul(a, b)), ("cuBLAS", lambda: torch.matmul(a, b))]:
                ms = bench_ms(fn)
                print(f"{name:7s} {s}^3 bf16: {ms:.3f} ms, {2 * s**3 / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
