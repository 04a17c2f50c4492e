"""Fused SwiGLU two ways: an elementwise kernel over [gate | up], and the activation in the GEMM's
epilogue so that the [M, 2I] gate/up intermediate is never written to memory.

    python chapters/ch07_triton/03_swiglu.py
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import torch

from chapters.ch07_triton.bench import bench_ms
from chapters.ch07_triton.check import passes, rel_err
from chapters.ch07_triton.matmul import matmul
from chapters.ch07_triton.swiglu import matmul_swiglu, swiglu, swiglu_torch


def main() -> None:
    torch.manual_seed(0)
    m, k, inter = (64, 576, 1536) if not INTERPRET else (5, 64, 96)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(m, k, device=KERNEL_DEVICE).to(dtype)
        w_gate_up = (torch.randn(2 * inter, k, device=KERNEL_DEVICE) / k**0.5).to(dtype)  # [W_gate; W_up]
        wg, wu = w_gate_up[:inter], w_gate_up[inter:]
        ref = swiglu_torch(x.double() @ wg.double().t(), x.double() @ wu.double().t())
        two_kernels = swiglu(matmul(x, w_gate_up.t()))  # GEMM writes [M, 2I], SwiGLU reads it back
        fused = matmul_swiglu(x, wg.t(), wu.t())  # one kernel, the activation in the epilogue
        for name, out in [("GEMM + swiglu kernel", two_kernels), ("GEMM with swiglu epilogue", fused)]:
            err = rel_err(out, ref)
            print(f"{str(dtype):15s} {name:26s} M={m} K={k} I={inter}: rel err {err:.1e} "
                  f"({'ok' if passes(err, dtype, uses_dot=True) else 'FAIL'})")
    if not INTERPRET:
        x, w_gate_up = x.to(torch.bfloat16), w_gate_up.to(torch.bfloat16)
        wg, wu = w_gate_up[:inter], w_gate_up[inter:]

        def torch_mlp_half() -> torch.Tensor:
            h = x @ w_gate_up.t()
            return torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        for name, fn in [("torch (GEMM, silu, mul)", torch_mlp_half),
                         ("triton GEMM + swiglu", lambda: swiglu(matmul(x, w_gate_up.t()))),
                         ("triton fused epilogue", lambda: matmul_swiglu(x, wg.t(), wu.t()))]:
            print(f"{name:24s} M={m} bf16: {bench_ms(fn) * 1e3:.1f} us")


if __name__ == "__main__":
    main()
