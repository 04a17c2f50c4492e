"""Fused RMSNorm: one read and one write per row, float32 accumulation, the weight applied in the
same kernel; and the variant that adds the residual first (x + r is written back as the new residual).

    python chapters/ch07_triton/01_rmsnorm.py
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import torch

from chapters.ch07_triton.bench import bench_ms
from chapters.ch07_triton.check import passes, poisoned, rel_err
from chapters.ch07_triton.rmsnorm import _launch_shape, rmsnorm, rmsnorm_torch


def main() -> None:
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for rows, cols in [(1, 576), (7, 100), (33, 576)]:  # 576 = the model's hidden size
            x = torch.randn(rows, cols, device=KERNEL_DEVICE).to(dtype)
            w = torch.randn(cols, device=KERNEL_DEVICE).to(dtype)
            out = rmsnorm(x, w, eps=1e-5, out=poisoned((rows, cols), dtype, KERNEL_DEVICE))
            err = rel_err(out, rmsnorm_torch(x.double(), w.double(), 1e-5))
            block_n, rows_per_program, warps = _launch_shape(cols)
            print(f"{str(dtype):15s} {rows:3d}x{cols:<4d} tile {rows_per_program}x{block_n}, {warps} warps: "
                  f"rel err {err:.1e} ({'ok' if passes(err, dtype) else 'FAIL'})")
    x, w, r = (torch.randn(*s, device=KERNEL_DEVICE) for s in [(5, 576), (576,), (5, 576)])
    expected = x.double() + r.double()
    out = rmsnorm(x, w, residual=r)
    print(f"fused residual: new residual rel err {rel_err(r, expected):.1e}, "
          f"output rel err {rel_err(out, rmsnorm_torch(expected, w.double())):.1e}")
    if not INTERPRET:
        x = torch.randn(32768, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        nbytes = 2 * x.numel() * 2
        for name, fn in [("triton", lambda: rmsnorm(x, w)), ("torch eager", lambda: rmsnorm_torch(x.float(), w).to(x.dtype))]:
            ms = bench_ms(fn)
            print(f"{name:12s} 32768x4096 bf16: {ms:.3f} ms, {nbytes / ms / 1e6:.0f} GB/s (read x + write y)")


if __name__ == "__main__":
    main()
