"""Chapter 8: online softmax, block-wise attention and the Triton flash-attention kernel against
naive attention in float64, for lengths that are not multiples of the block, grouped-query heads,
causal and not, bf16 and fp32. On a machine without a GPU the kernel runs in Triton's interpreter."""

from __future__ import annotations

import math

import pytest
import torch

from chapters.ch07_triton.interpret import KERNEL_DEVICE
from chapters.ch07_triton.check import passes, poisoned, rel_err
from chapters.ch08_flash_attention.attention import (blockwise_attention, causal_mask, naive_attention,
                                                     online_softmax, online_softmax_stats)
from chapters.ch08_flash_attention.flash import flash_attention


def qkv(b: int, hq: int, hkv: int, tq: int, tk: int, dtype: torch.dtype, seed: int = 0, d: int = 64):
    g = torch.Generator().manual_seed(seed)
    make = lambda h, t: torch.randn(b, h, t, d, generator=g).to(dtype).to(KERNEL_DEVICE)  # noqa: E731
    return make(hq, tq), make(hkv, tk), make(hkv, tk)


def reference(q, k, v, causal: bool) -> torch.Tensor:
    """Textbook attention in float64 with K/V heads repeated: independent of our GQA indexing."""
    group = q.shape[1] // k.shape[1]
    k64, v64 = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = q.double() @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    return s.softmax(-1) @ v64


def test_online_softmax_matches_softmax() -> None:
    x = torch.randn(4, 103, dtype=torch.float64) * 10
    assert torch.allclose(online_softmax(x, block=16), x.softmax(-1), rtol=0, atol=1e-12)
    m, l = online_softmax_stats(x[0].tolist())
    assert m == x[0].max().item()
    assert math.isclose(l, torch.exp(x[0] - x[0].max()).sum().item(), rel_tol=1e-12)


@pytest.mark.parametrize("tq, tk, causal", [(1, 1, True), (17, 17, True), (100, 100, True), (7, 40, True),
                                            (30, 45, False)])
def test_naive_and_blockwise_match_reference(tq: int, tk: int, causal: bool) -> None:
    q, k, v = qkv(2, 9, 3, tq, tk, torch.float64)
    ref = reference(q, k, v, causal)
    assert rel_err(naive_attention(q, k, v, causal), ref) < 1e-12
    assert rel_err(blockwise_attention(q, k, v, causal, block=16), ref) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b, hq, hkv, tq, tk, causal", [
    (1, 9, 3, 1, 1, True),      # a single token
    (2, 9, 3, 17, 17, True),    # the model's heads, length below one block
    (1, 3, 1, 100, 100, True),  # several blocks, the last one partial
    (1, 2, 2, 7, 40, True),     # prefill of 7 tokens after a 33-token cached prefix
    (1, 4, 2, 30, 45, False),   # not causal, Tq != Tk
])
def test_flash_attention_matches_reference(b, hq, hkv, tq, tk, causal, dtype: torch.dtype) -> None:
    q, k, v = qkv(b, hq, hkv, tq, tk, dtype, seed=tq + tk)
    out = flash_attention(q, k, v, causal, out=poisoned(tuple(q.shape), dtype, KERNEL_DEVICE))
    # Tolerance as for a GEMM: two dots per block (TF32 on a GPU for float32 inputs).
    assert passes(rel_err(out, reference(q, k, v, causal)), dtype, uses_dot=True)


def test_flash_attention_accepts_bthd_views() -> None:
    """[B, T, H, D] storage passed as .transpose(1, 2): strided, no copy."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 20, h, 64, generator=g).to(KERNEL_DEVICE).transpose(1, 2) for h in (4, 2, 2))
    assert not q.is_contiguous()
    assert passes(rel_err(flash_attention(q, k, v), reference(q, k, v, True)), torch.float32, uses_dot=True)


def _z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype, device=KERNEL_DEVICE)


@pytest.mark.parametrize("call, message", [
    (lambda: flash_attention(_z(1, 9, 4, 64), _z(1, 4, 4, 64), _z(1, 4, 4, 64)), "not a multiple"),
    (lambda: flash_attention(_z(1, 2, 8, 64), _z(1, 2, 4, 64), _z(1, 2, 4, 64)), "at least as many keys"),
    (lambda: flash_attention(_z(1, 2, 4, 48), _z(1, 2, 4, 48), _z(1, 2, 4, 48)), "power of two"),
    (lambda: flash_attention(_z(2, 4, 64), _z(2, 4, 64), _z(2, 4, 64)), "4-D"),
    (lambda: flash_attention(_z(1, 2, 4, 64), _z(1, 2, 4, 64), _z(1, 2, 5, 64)), "differ"),
    (lambda: flash_attention(_z(1, 2, 4, 64, dtype=torch.float16), _z(1, 2, 4, 64, dtype=torch.float16),
                             _z(1, 2, 4, 64, dtype=torch.float16)), "not supported"),
    (lambda: flash_attention(_z(1, 2, 4, 64), _z(1, 2, 4, 64), _z(1, 2, 4, 64), sm_scale=-1.0), "sm_scale"),
    (lambda: blockwise_attention(_z(1, 2, 4, 64), _z(1, 2, 4, 64), _z(1, 2, 4, 64), block=0), "block"),
    (lambda: online_softmax(_z(3), block=0), "block"),
])
def test_bad_input_is_a_clear_value_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
