"""The flash kernel as an attention backend for chapter 3's model (its `attn` argument).

`FlashNoCacheAttention` is `NoCacheAttention` with the arithmetic swapped: every call attends over
its own keys, causally. It serves a prefill of unpadded rows (positions 0..T-1 in every row); the
kernel's bottom-right causal alignment would also serve a prefill after a cached prefix, once a
cache backend hands it the stored keys (chapter 4's cache, chapter 10's pages).
"""

from __future__ import annotations

import torch
from torch import Tensor

from chapters.ch08_flash_attention.flash import flash_attention


class FlashNoCacheAttention:
    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        T = q.shape[2]
        expected = torch.arange(T, device=positions.device).expand_as(positions)
        if not torch.equal(positions, expected):
            raise ValueError("FlashNoCacheAttention: every row must hold positions 0..T-1 (no padding, no cache)")
        # q, k, v arrive as transposed views of [B, T, H, D]: strided, last dimension contiguous.
        return flash_attention(q, k, v, causal=True)
