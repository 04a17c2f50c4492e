"""RoPE fused with the KV-cache write: one kernel where chapter 6's step launched about sixteen.

Chapter 3's `RotaryEmbedding` gathers the cos and sin rows of the positions, casts them, and
rotates q and k with half a dozen elementwise ops each (`rotate_half` alone is a negation and a
concatenation); chapter 6's cache then copies k and v into their slots with two more kernels. Every
one of those ops reads and writes a few hundred bytes, so each costs a launch and nothing else.
This kernel does the whole thing per (token, head) in registers: load x, rotate it in float32,
store q where attention will read it, and store k and v straight into the cache slot that the
token's position names.

Grid: (tokens, query heads). Program (t, h) rotates query head h of token t; the programs with
h < kv_heads also rotate key head h and copy value head h into the cache (grouped-query attention
has fewer KV heads than query heads, so some programs have only a query to do).
The position comes from a device tensor, read by the kernel, so a CUDA graph that recorded this
launch writes wherever the position says at replay time.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import check_tensors  # sets TRITON_INTERPRET first

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate(x_ptr, cos, sin, out_ptr, HALF: tl.constexpr):
    """out = x * cos + rotate_half(x) * sin on one head vector: with x = (x1, x2) and cos, sin
    equal on both halves, that is (x1 c - x2 s, x2 c + x1 s)."""
    d = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + d).to(tl.float32)
    x2 = tl.load(x_ptr + HALF + d).to(tl.float32)
    tl.store(out_ptr + d, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty))
    tl.store(out_ptr + HALF + d, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty))


@triton.jit
def rope_cache_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, cos_ptr, sin_ptr, q_out_ptr, k_cache_ptr, v_cache_ptr,
                      n_kv_heads, stride_qh, stride_qt, stride_kh, stride_kt, stride_vh, stride_vt,
                      stride_oh, stride_ot, stride_cos, stride_ch, stride_cs, stride_vch, stride_vcs,
                      HALF: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    pos = tl.load(pos_ptr + t)
    d = tl.arange(0, HALF)
    # The angle tables repeat their first half (cat([a, a])): the first half is all we need.
    cos = tl.load(cos_ptr + pos * stride_cos + d)
    sin = tl.load(sin_ptr + pos * stride_cos + d)
    _rotate(q_ptr + h * stride_qh + t * stride_qt, cos, sin, q_out_ptr + h * stride_oh + t * stride_ot, HALF)
    if h < n_kv_heads:
        _rotate(k_ptr + h * stride_kh + t * stride_kt, cos, sin,
                k_cache_ptr + h * stride_ch + pos * stride_cs, HALF)
        v = tl.load(v_ptr + h * stride_vh + t * stride_vt + tl.arange(0, 2 * HALF))
        tl.store(v_cache_ptr + h * stride_vch + pos * stride_vcs + tl.arange(0, 2 * HALF), v)


def rope_cache_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                     cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                     v_cache: torch.Tensor) -> torch.Tensor:
    """Rotate q [Hq, T, D] and k [Hkv, T, D] by `positions` [T] (cos, sin: [max_positions, D]
    float32 tables), store the rotated k and the unchanged v [Hkv, T, D] in the cache
    [Hkv, max_len, D] at slot = position, and return the rotated q as [T, Hq, D] (contiguous:
    the layout attention's output and the o projection want). Strided views are fine as long
    as the head_dim axis is contiguous."""
    check_tensors("rope_cache_write", q, k, v, k_cache, v_cache, dtypes=(torch.float32, torch.bfloat16))
    check_tensors("rope_cache_write", cos, sin, dtypes=(torch.float32,))
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape or k_cache.shape != v_cache.shape:
        raise ValueError(f"rope_cache_write: expected q [Hq, T, D], k and v [Hkv, T, D], two equal caches; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, {tuple(k_cache.shape)}")
    hq, t, d = q.shape
    hkv = k.shape[0]
    if k.shape[1:] != (t, d) or hkv > hq or k_cache.shape[0] != hkv or k_cache.shape[2] != d:
        raise ValueError(f"rope_cache_write: shapes disagree: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"cache {tuple(k_cache.shape)}")
    if d < 2 or d & (d - 1):
        raise ValueError(f"rope_cache_write: head_dim must be a power of two, got {d}")
    if positions.shape != (t,) or positions.dtype != torch.long:
        raise ValueError(f"rope_cache_write: positions must be int64 of shape ({t},), got "
                         f"{positions.dtype} {tuple(positions.shape)}")
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[1] != d:
        raise ValueError(f"rope_cache_write: cos and sin must be [max_positions, {d}]")
    if any(x.stride(-1) != 1 for x in (q, k, v, k_cache, v_cache, cos, sin)):
        raise ValueError("rope_cache_write: the head_dim (last) axis of every tensor must be contiguous")
    q_out = torch.empty(t, hq, d, dtype=q.dtype, device=q.device)
    # Positions are not checked against the cache length here: that would read the device tensor
    # back on every call. The caller owns that check (DecodeStep refuses positions past max_len).
    rope_cache_kernel[(t, hq)](
        q, k, v, positions, cos, sin, q_out, k_cache, v_cache, hkv,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        q_out.stride(1), q_out.stride(0), cos.stride(0), k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1), HALF=d // 2)
    return q_out
