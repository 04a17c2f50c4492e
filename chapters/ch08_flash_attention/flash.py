"""A Triton flash-attention forward kernel: causal or not, grouped-query, bf16 or fp32, any lengths.

One program owns BLOCK_M queries of one (batch, query head). It keeps their running max m,
running sum l and output accumulator in registers and streams the keys and values of the
matching KV head through in BLOCK_N blocks: scores never leave the chip, so memory is the
inputs plus the output, linear in the length.

Layout [B, H, T, D] with any strides except a contiguous last dimension: a [B, T, H, D] tensor is
passed as x.transpose(1, 2) without a copy. K/V have Hkv heads; query head h reads KV head
h // (Hq // Hkv), computed in the kernel: K/V are never repeated in memory. Causal masks are
bottom-right aligned (queries are the last Tq of Tk positions), so a prefill can attend to a
cached prefix by passing Tk > Tq.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, check_tensors  # sets TRITON_INTERPRET first

import math

import torch
import triton
import triton.language as tl

from chapters.ch08_flash_attention.attention import check_attention_shapes

LOG2_E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)); exp2 is the cheaper instruction


def _config(bm: int, bn: int, stages: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages, num_warps=warps)


GPU_CONFIGS = [
    _config(128, 64, 3, 4), _config(128, 64, 4, 8), _config(128, 128, 3, 8), _config(128, 32, 4, 4),
    _config(64, 64, 4, 4), _config(64, 32, 4, 4), _config(128, 128, 2, 8), _config(64, 128, 3, 4),
]
# The interpreter cannot time configs: one, with tiles big enough to keep the program count low.
CONFIGS = [_config(32, 32, 1, 1)] if INTERPRET else GPU_CONFIGS


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n, offs_d, stride_kt, stride_vt,
            q_offset, T_K, scale_log2, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold one block of BLOCK_N keys/values into the running (acc, l, m) of every query row."""
    cols = start_n + offs_n
    in_bounds = cols < T_K
    # K^T tile [D, BLOCK_N], read straight from K's rows by swapping the index roles.
    k = tl.load(k_base + cols[None, :] * stride_kt + offs_d[:, None], mask=in_bounds[None, :], other=0.0)
    v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :], mask=in_bounds[:, None], other=0.0)
    if DOT_F32:  # the interpreter cannot multiply bf16 tiles (see ch07 interpret.py)
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, k) * scale_log2  # [BLOCK_M, BLOCK_N] scores, in log2 units, float32
    if MASKED:  # only blocks on the diagonal or past the end need the mask
        visible = in_bounds[None, :]
        if IS_CAUSAL:
            visible = visible & (cols[None, :] <= q_offset + offs_m[:, None])
        qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp2(m_i - m_new)  # rescales what was summed against the old maximum
    p = tl.exp2(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.autotune(configs=CONFIGS, key=["HEAD_DIM", "IS_CAUSAL", "T_BUCKET"])
@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, scale_log2,
                     stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                     stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
                     n_q_heads, group, T_Q, T_K, T_BUCKET,
                     HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, DOT_F32: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Causal blocks near the end have the most keys: launch them first so the short ones fill
    # the gaps at the tail of the grid.
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_q_heads
    h = bh % n_q_heads
    kv_h = h // group  # grouped-query: this query head's KV head, no copy of K/V
    q_offset = T_K - T_Q  # absolute position of query 0

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
                mask=offs_m[:, None] < T_Q, other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    k_base = k_ptr + b * stride_kb + kv_h * stride_kh
    v_base = v_ptr + b * stride_vb + kv_h * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if IS_CAUSAL:
        # Keys [0, unmasked_end) are visible to every row of this block and in bounds;
        # keys up to `end` are visible to some row; beyond `end` to none (skipped entirely).
        unmasked_end = (min(q_offset + start_m * BLOCK_M + 1, T_K) // BLOCK_N) * BLOCK_N
        end = min(q_offset + (start_m + 1) * BLOCK_M, T_K)
    else:
        unmasked_end = (T_K // BLOCK_N) * BLOCK_N
        end = T_K
    for start_n in range(0, unmasked_end, BLOCK_N):
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n, offs_d,
                                stride_kt, stride_vt, q_offset, T_K, scale_log2, False, IS_CAUSAL, DOT_F32)
    for start_n in range(unmasked_end, end, BLOCK_N):
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, start_n, offs_m, offs_n, offs_d,
                                stride_kt, stride_vt, q_offset, T_K, scale_log2, True, IS_CAUSAL, DOT_F32)

    out = acc / l_i[:, None]  # the softmax denominator, applied once at the end
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < T_Q)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                    sm_scale: float | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v for q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D]."""
    check_tensors("flash_attention", q, k, v, dtypes=(torch.float32, torch.bfloat16))
    check_attention_shapes("flash_attention", q, k, v, causal)
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    if d < 16 or d > 256 or d & (d - 1):
        raise ValueError(f"flash_attention: head_dim must be a power of two in [16, 256], got {d}")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("flash_attention: the head_dim (last) dimension must be contiguous")
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"flash_attention: sm_scale must be a positive finite number, got {sm_scale}")
    out = torch.empty_like(q) if out is None else out
    if out.shape != q.shape or out.dtype != q.dtype or out.stride(-1) != 1:
        raise ValueError(f"flash_attention: out must have q's shape {tuple(q.shape)} and dtype, last dim contiguous")
    grid = lambda meta: (triton.cdiv(tq, meta["BLOCK_M"]), b * hq)  # noqa: E731
    flash_fwd_kernel[grid](
        q, k, v, out, scale * LOG2_E,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        hq, hq // hkv, tq, tk, triton.next_power_of_2(tq),  # T_BUCKET: retune per power-of-two length
        HEAD_DIM=d, IS_CAUSAL=causal, DOT_F32=INTERPRET)
    return out
