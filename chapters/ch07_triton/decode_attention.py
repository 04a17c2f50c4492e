"""Attention over a KV cache for the newest tokens, in one kernel: chapter 6's `attend` is eight.

Chapter 6's static step attends with plain PyTorch: a copy of q into a grouped layout, a batched
matmul for the scores, a scale, a mask, a softmax, a cast, a second batched matmul, and it does so
over *every* slot of the cache (the mask hides the empty ones), because a CUDA graph cannot change
a tensor's shape between replays. This kernel reads the query's position from a device tensor and
loops over slots 0..position only: the graph stays the same, the work follows the length.

Grid: (tokens, query heads), one program per query vector. It streams the visible keys and values
of its KV head (h // group, grouped-query attention without copying K/V) in BLOCK_N-slot blocks
with the online softmax of chapter 8 (running maximum m, running sum l, rescaled accumulator), all
in float32. One query per program is the right shape for decode (a query block would be one row
high); a prefill would rather tile queries, which is chapter 8's flash kernel.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import check_tensors  # sets TRITON_INTERPRET first

import math

import torch
import triton
import triton.language as tl

LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2 e)


@triton.jit
def decode_attention_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, o_ptr, scale_log2, group,
                            stride_qt, stride_qh, stride_kh, stride_ks, stride_vh, stride_vs,
                            stride_ot, stride_oh, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    kv = h // group
    n = tl.load(pos_ptr + t) + 1  # slots 0..position are visible (causal by position)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + t * stride_qt + h * stride_qh + d).to(tl.float32) * scale_log2
    # Running statistics as 1-element tensors, so their type stays the same around the loop.
    m = tl.full([1], float("-inf"), tl.float32)
    l = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for start in range(0, n, BLOCK_N):
        s_idx = start + tl.arange(0, BLOCK_N)
        live = s_idx < n
        k = tl.load(k_ptr + kv * stride_kh + s_idx[:, None] * stride_ks + d[None, :], mask=live[:, None], other=0.0)
        scores = tl.sum(k.to(tl.float32) * q[None, :], axis=1)  # [BLOCK_N], in log2 units
        scores = tl.where(live, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=0))
        alpha = tl.exp2(m - m_new)  # rescales what was summed against the old maximum
        p = tl.exp2(scores - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        v = tl.load(v_ptr + kv * stride_vh + s_idx[:, None] * stride_vs + d[None, :], mask=live[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        m = m_new
    tl.store(o_ptr + t * stride_ot + h * stride_oh + d, (acc / l).to(o_ptr.dtype.element_ty))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     positions: torch.Tensor, block_n: int = 64) -> torch.Tensor:
    """q [T, Hq, D] (token t at `positions[t]`), caches [Hkv, max_len, D] -> [T, Hq, D]: each
    query attends to cache slots 0..its position. The caller must have written those slots (the
    query's own key included) and keeps positions < max_len."""
    check_tensors("decode_attention", q, k_cache, v_cache, dtypes=(torch.float32, torch.bfloat16))
    if q.dim() != 3 or k_cache.dim() != 3 or k_cache.shape != v_cache.shape:
        raise ValueError(f"decode_attention: expected q [T, Hq, D] and two [Hkv, max_len, D] caches, got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    t, hq, d = q.shape
    hkv = k_cache.shape[0]
    if k_cache.shape[2] != d or hq % hkv:
        raise ValueError(f"decode_attention: {hq} query heads of dim {d} cannot use a cache of shape "
                         f"{tuple(k_cache.shape)}")
    if d < 16 or d & (d - 1) or block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"decode_attention: head_dim and block_n must be powers of two >= 16, got {d}, {block_n}")
    if positions.shape != (t,) or positions.dtype != torch.long:
        raise ValueError(f"decode_attention: positions must be int64 of shape ({t},)")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("decode_attention: the head_dim (last) axis must be contiguous")
    out = torch.empty(t, hq, d, dtype=q.dtype, device=q.device)
    decode_attention_kernel[(t, hq)](
        q, k_cache, v_cache, positions, out, LOG2_E / math.sqrt(d), hq // hkv,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        out.stride(0), out.stride(1), HEAD_DIM=d, BLOCK_N=block_n)
    return out
