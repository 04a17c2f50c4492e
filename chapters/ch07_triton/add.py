"""The smallest Triton kernel: out = x + y. Programs, blocks and masks."""

from __future__ import annotations

from chapters.ch07_triton.interpret import check_tensors  # sets TRITON_INTERPRET first

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    # One program handles one BLOCK of consecutive elements; the grid has cdiv(n, BLOCK) programs.
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    # The last block usually runs past the end: the mask turns those lanes' loads and stores off.
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None, block: int = 1024) -> torch.Tensor:
    """x + y for two contiguous tensors of one shape and dtype (float32 or bfloat16)."""
    check_tensors("add", x, y, dtypes=(torch.float32, torch.bfloat16))
    if x.shape != y.shape:
        raise ValueError(f"add: shapes differ ({tuple(x.shape)} vs {tuple(y.shape)})")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("add: inputs must be contiguous (the kernel walks flat memory)")
    if block <= 0 or block & (block - 1):
        raise ValueError(f"add: block must be a positive power of two, got {block}")
    out = torch.empty_like(x) if out is None else out
    if out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError("add: out must be a contiguous tensor of the inputs' shape and dtype")
    n = x.numel()
    grid = (triton.cdiv(n, block),)
    add_kernel[grid](x, y, out, n, BLOCK=block)
    return out
