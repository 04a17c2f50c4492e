"""Fused RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, one read of x and one write of y per row.

PyTorch's eager version launches several kernels (square, mean, add, rsqrt, two multiplies) and
moves the row through memory each time; this kernel keeps a tile of rows in registers, reduces
in float32, and writes once. With `residual`, it also adds the residual first and writes the sum
back (the "fused add + norm" that a transformer block does before each norm), saving a kernel.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import check_tensors  # sets TRITON_INTERPRET first

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, n_rows, n_cols, stride_x, stride_r, stride_o, eps,
                   HAS_RESIDUAL: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # Each program normalises ROWS rows; a whole row fits in one BLOCK_N tile (n_cols <= BLOCK_N).
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        # x <- x + residual, and the sum is the new residual stream: store it where x was.
        r = tl.load(res_ptr + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        x = x + r
        tl.store(res_ptr + rows[:, None] * stride_r + cols[None, :], x.to(res_ptr.dtype.element_ty), mask=mask)
    # Masked lanes loaded 0.0, so they add nothing; divide by the true row length.
    mean_sq = tl.sum(x * x, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(out_ptr + rows[:, None] * stride_o + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def _launch_shape(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_N, ROWS, num_warps): a power-of-two tile holding whole rows, ~8k elements per program."""
    block_n = triton.next_power_of_2(n_cols)
    rows = max(1, min(16, 8192 // block_n))
    num_warps = 4 if block_n * rows <= 4096 else 8
    return block_n, rows, num_warps


MAX_COLS = 65536  # a row must fit one tile of registers/shared memory


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5, residual: torch.Tensor | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension of x ([..., N]). With `residual` (same shape as x), computes
    rmsnorm(x + residual) and overwrites `residual` with x + residual, in one kernel."""
    tensors = (x, weight) if residual is None else (x, weight, residual)
    check_tensors("rmsnorm", *tensors, dtypes=(torch.float32, torch.bfloat16))
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"rmsnorm: x must have a non-empty last dimension, got shape {tuple(x.shape)}")
    n_cols = x.shape[-1]
    if weight.shape != (n_cols,):
        raise ValueError(f"rmsnorm: weight shape {tuple(weight.shape)} != ({n_cols},)")
    if n_cols > MAX_COLS:
        raise ValueError(f"rmsnorm: rows of {n_cols} elements exceed the one-tile limit {MAX_COLS}")
    if not eps > 0:
        raise ValueError(f"rmsnorm: eps must be > 0, got {eps}")
    if not (x.is_contiguous() and weight.is_contiguous()):
        raise ValueError("rmsnorm: x and weight must be contiguous")
    if residual is not None and (residual.shape != x.shape or not residual.is_contiguous()):
        raise ValueError("rmsnorm: residual must be contiguous and shaped like x")
    out = torch.empty_like(x) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError("rmsnorm: out must be contiguous and shaped like x, in x's dtype")
    x2, o2 = x.view(-1, n_cols), out.view(-1, n_cols)
    r2 = x2 if residual is None else residual.view(-1, n_cols)
    n_rows = x2.shape[0]
    block_n, rows, num_warps = _launch_shape(n_cols)
    grid = (triton.cdiv(n_rows, rows),)
    rmsnorm_kernel[grid](x2, r2, weight, o2, n_rows, n_cols, x2.stride(0), r2.stride(0), o2.stride(0), eps,
                         HAS_RESIDUAL=residual is not None, ROWS=rows, BLOCK_N=block_n, num_warps=num_warps)
    return out


def rmsnorm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The reference, in the dtype of x (pass float64 tensors for the exact answer)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
