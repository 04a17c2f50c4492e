"""Attention three ways, all exact: naive (the whole score matrix), online softmax on a vector,
and block-wise attention in plain PyTorch (one block of keys at a time, O(n) memory).

Layout: q [B, Hq, Tq, D], k and v [B, Hkv, Tk, D], with Hq a multiple of Hkv (grouped-query
attention: query head h reads KV head h // (Hq // Hkv)). Causal masks are aligned bottom-right:
the Tq queries are the *last* Tq positions of a Tk-long sequence, so query i sees keys
0 .. i + (Tk - Tq). With Tq == Tk that is the usual lower triangle; with Tq < Tk it is a prefill
that extends a cached prefix.
"""

from __future__ import annotations

import math

import torch


def check_attention_shapes(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{name}: expected 4-D [B, H, T, D] tensors, got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    (b, hq, tq, d), (bk, hkv, tk, dk) = q.shape, k.shape
    if k.shape != v.shape:
        raise ValueError(f"{name}: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if b != bk or d != dk:
        raise ValueError(f"{name}: q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"{name}: {hq} query heads is not a multiple of {hkv} KV heads")
    if min(b, tq, tk, d) == 0:
        raise ValueError(f"{name}: empty dimension in q {tuple(q.shape)} or k {tuple(k.shape)}")
    if causal and tk < tq:
        raise ValueError(f"{name}: causal attention needs at least as many keys ({tk}) as queries ({tq})")


def causal_mask(tq: int, tk: int, device: torch.device | str) -> torch.Tensor:
    """[Tq, Tk] bool, True where query i may see key j (j <= i + Tk - Tq)."""
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                    sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v with the full [B, H, Tq, Tk] score matrix in float32.

    Peak extra memory ~ 8 bytes per score: the float32 scores and the float32 probabilities are
    alive together during softmax, 8 * B * Hq * Tq * Tk bytes. (The bool mask, Tq * Tk bytes, and
    the bf16 product before its cast to float32 are freed before softmax starts.)
    """
    check_attention_shapes("naive_attention", q, k, v, causal)
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    # Grouped-query without copying K/V: view the query heads as [Hkv, group] and broadcast.
    qg = q.reshape(b, hkv, hq // hkv, tq, d)
    acc_dtype = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for a reference
    scores = ((qg * scale) @ k.unsqueeze(2).transpose(-1, -2)).to(acc_dtype)  # [B, Hkv, G, Tq, Tk]
    if causal:
        scores.masked_fill_(~causal_mask(tq, tk, q.device), float("-inf"))
    probs = scores.softmax(dim=-1)
    del scores  # drop the scores before the next quadratic temporary (probs cast to v's dtype)
    out = probs.to(v.dtype) @ v.unsqueeze(2)
    return out.reshape(b, hq, tq, d)


def naive_peak_bytes(b: int, hq: int, tq: int, tk: int) -> int:
    """The formula for naive_attention's peak memory: two float32 score-sized tensors."""
    return 8 * b * hq * tq * tk


def online_softmax_stats(xs: list[float]) -> tuple[float, float]:
    """One pass over the numbers: the running max m and the running sum l = sum(exp(x - m)).

    When a new maximum arrives, the sum so far was computed against the old maximum; multiplying
    it by exp(m_old - m_new) rescales it exactly. This rescaling is the whole trick of flash attention.
    """
    m, l = float("-inf"), 0.0
    for x in xs:
        m_new = max(m, x)
        l = l * math.exp(m - m_new) + math.exp(x - m_new)
        m = m_new
    return m, l


def online_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """softmax over the last dimension, reading x in blocks for the statistics (one pass), then
    normalising: the same numbers as x.softmax(-1), never holding exp(x) for all of x at once
    while the maximum is still unknown."""
    if block <= 0:
        raise ValueError(f"online_softmax: block must be positive, got {block}")
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block):
        chunk = x[..., start:start + block]
        m_new = torch.maximum(m, chunk.amax(dim=-1, keepdim=True))
        l = l * torch.exp(m - m_new) + torch.exp(chunk - m_new).sum(dim=-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l


def blockwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                        sm_scale: float | None = None, block: int = 256) -> torch.Tensor:
    """Exact attention visiting `block` keys at a time with the online-softmax rescaling.

    Extra memory is O(Tq * block) per head instead of O(Tq * Tk): linear in the sequence length.
    Plain PyTorch, one Python iteration per key block: correct and memory-lean, but every block
    still round-trips its scores through memory. The Triton kernel keeps them in registers.
    """
    check_attention_shapes("blockwise_attention", q, k, v, causal)
    if block <= 0:
        raise ValueError(f"blockwise_attention: block must be positive, got {block}")
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    qg = q.reshape(b, hkv, hq // hkv, tq, d) * scale
    m = torch.full((b, hkv, hq // hkv, tq, 1), float("-inf"), dtype=acc_dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros((b, hkv, hq // hkv, tq, d), dtype=acc_dtype, device=q.device)
    rows = torch.arange(tq, device=q.device)[:, None] + (tk - tq)  # each query's absolute position
    for start in range(0, tk, block):
        kb = k[:, :, start:start + block].unsqueeze(2)
        vb = v[:, :, start:start + block].unsqueeze(2)
        s = (qg @ kb.transpose(-1, -2)).to(acc_dtype)  # [B, Hkv, G, Tq, block]
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)[None, :]
            s.masked_fill_(cols > rows, float("-inf"))
        # Key 0 is visible to every query, so after the first block m is finite: no -inf - -inf.
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = l * alpha + p.sum(dim=-1, keepdim=True)
        acc = acc * alpha + p @ vb.to(acc_dtype)
        m = m_new
    return (acc / l).to(q.dtype).reshape(b, hq, tq, d)
