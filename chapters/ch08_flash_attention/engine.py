"""Chapter 8's engine: chapter 7's, with the prefill's attention done by the flash kernel.

Chapter 7 left the prefill to chapter 6's PyTorch path, whose attention builds the full score
tensor (query heads x prompt x cache slots, in float32) over every slot of the cache bucket: at a
prompt of 8,191 tokens that is gigabytes written and read back, for one request. The flash kernel
streams the keys through on-chip tiles instead, so memory grows with the length, not its square.

One thing changes: the prefill's attention backend (`FlashPrefillAttention`), which writes the
prompt's keys and values into the same static cache chapter 6 allocated and then runs the flash
kernel over the cache's filled slots. The kernel aligns its causal mask bottom-right (the queries
are the last Tq of Tk keys), so a prompt that continues a cached prefix works unchanged; here the
prefix is empty. The decode step, its kernels and its CUDA graph are chapter 7's, untouched.

On a CPU without `kernels=True` the engine is chapter 6's, as chapter 7's is (see its docstring).
"""

from __future__ import annotations

import torch
from torch import Tensor

from chapters.ch06_profiling.graph import StaticKVCache
from chapters.ch07_triton.engine import TritonDecodeStep, TritonEngine
from chapters.ch08_flash_attention.flash import flash_attention


class FlashPrefillAttention:
    """Chapter 3's backend interface over chapter 6's `StaticKVCache`, for a run of consecutive
    positions p0..p0+T-1 of one sequence: write their keys and values at those slots, then let
    every query attend causally to slots 0..its position with the flash kernel."""

    def __init__(self, cache: StaticKVCache) -> None:
        self.cache = cache
        self.end = 0  # slots filled after this call's writes, set at layer 0

    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        if q.shape[0] != 1:
            raise ValueError(f"FlashPrefillAttention holds one sequence; got a batch of {q.shape[0]}")
        if layer == 0:  # all layers write the same slots: check them once per forward pass
            start, t = int(positions[0, 0]), positions.shape[1]
            expected = torch.arange(start, start + t, device=positions.device)
            if start < 0 or not torch.equal(positions[0], expected):
                raise ValueError("FlashPrefillAttention: positions must be consecutive and >= 0 "
                                 f"(a prompt continuing slots 0..{start - 1}), got {positions[0].tolist()[:8]}...")
            if start + t > self.cache.max_len:
                raise ValueError(f"positions up to {start + t - 1} do not fit the cache's {self.cache.max_len} slots")
            self.end = start + t
        keys, values = self.cache.keys[layer], self.cache.values[layer]  # [1, Hkv, max_len, D]
        keys[:, :, self.end - k.shape[2]:self.end] = k
        values[:, :, self.end - v.shape[2]:self.end] = v
        # Queries are the last T of `end` keys: the kernel's bottom-right causal alignment.
        return flash_attention(q, keys[:, :, :self.end], values[:, :, :self.end], causal=True)


class FlashPrefillStep(TritonDecodeStep):
    """Chapter 7's step with the prefill's attention swapped for the flash kernel."""

    def prefill(self, prompt_ids: list[int]) -> Tensor:
        device = self.ids.device
        ids = torch.tensor([prompt_ids], device=device)
        positions = torch.arange(len(prompt_ids), device=device)[None]
        return self.model(ids, positions, FlashPrefillAttention(self.cache), last_only=True)[0, -1]


class FlashAttentionEngine(TritonEngine):
    name = "ch08_flash_attention"
    step_class = FlashPrefillStep
    prefill_kind = "chapter 6's PyTorch GEMMs + the flash-attention kernel"
