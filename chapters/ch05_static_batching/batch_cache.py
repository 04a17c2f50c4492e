"""The KV cache of a static batch: one contiguous region per row (chapter 5).

Chapter 4's cache holds one sequence. A batch needs one region per row, and rows of different
lengths must not disturb each other. The rule that makes that easy: **row r's slot s holds the key
and value of row r's position s.** Left padding then costs the cache nothing: a padding slot has a
negative position and is written nowhere (it goes to a spare slot that attention never reads), so
each row's keys sit exactly where its solo run would put them, and causal visibility by position
(`chapters/ch03_model/model.py`, `causal_visibility`) hides everything else: slots a shorter row
has not reached, and whatever a finished row left behind.

The cache grows as the batch runs (doubling, up to the longest row's prompt plus max_tokens), so a
batch whose requests ask for thousands of tokens but stop early never holds memory it did not use.
"""

from __future__ import annotations

import torch
from torch import Tensor

from chapters.ch03_model.model import Llama, attend, causal_visibility


class BatchKVCache:
    """Chapter 3's attention-backend interface (`forward(layer, q, k, v, positions)`) for a batch
    of `rows` sequences; keys and values per layer are [rows, kv_heads, capacity + 1, head_dim],
    the last slot being where padding is written and never read."""

    def __init__(
        self,
        layers: int,
        rows: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        limit: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        if not 1 <= capacity <= limit:
            raise ValueError(f"capacity must be in [1, limit={limit}], got {capacity}")
        self.limit = limit  # no row ever needs more slots than this
        self.capacity = 0
        shape = (rows, kv_heads, 0, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.visible = torch.zeros(rows, 1, 0, dtype=torch.bool, device=device)
        self.ensure(capacity)

    @classmethod
    def for_model(cls, model: Llama, rows: int, capacity: int, limit: int) -> BatchKVCache:
        cfg, weight = model.config, model.embed_tokens.weight
        return cls(cfg.num_layers, rows, cfg.num_kv_heads, cfg.head_dim, capacity, limit,
                   weight.device, weight.dtype)

    @property
    def bytes_per_row(self) -> int:
        """Bytes one row's region holds now (keys and values, every layer, spare slot excluded)."""
        k = self.keys[0]
        return 2 * len(self.keys) * k.shape[1] * self.capacity * k.shape[3] * k.element_size()

    def ensure(self, slots: int) -> None:
        """Make room for positions [0, slots): grow by doubling (capped at `limit`), copying what
        is stored. Amortised, a row's keys are copied about once."""
        if slots <= self.capacity:
            return
        if slots > self.limit:
            raise ValueError(f"position {slots - 1} is past this batch's limit of {self.limit} slots")
        new = min(max(slots, 2 * self.capacity), self.limit)
        for cache in (self.keys, self.values):
            for layer, old in enumerate(cache):
                grown = old.new_zeros(old.shape[0], old.shape[1], new + 1, old.shape[3])
                grown[:, :, : self.capacity] = old[:, :, : self.capacity]
                cache[layer] = grown
        self.capacity = new

    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        if layer == 0:  # every layer writes the same slots and sees the same ones: work it out once
            self._plan(positions)
        index = self.index.expand(-1, k.shape[1], -1, k.shape[3])
        self.keys[layer].scatter_(2, index, k)
        self.values[layer].scatter_(2, index, v)
        n = self.visible.shape[-1]
        return attend(q, self.keys[layer][:, :, :n], self.values[layer][:, :, :n], self.visible)

    def _plan(self, positions: Tensor) -> None:
        """Where this call's keys go ([B, 1, T, 1] slot indices: the position, or the spare slot
        for padding) and which slots each query sees ([B, T, n], n = the furthest position + 1)."""
        n = int(positions.max().item()) + 1
        self.ensure(n)
        slot = torch.where(positions >= 0, positions, self.capacity)
        self.index = slot[:, None, :, None]
        slot_positions = torch.arange(n, device=positions.device).expand(positions.shape[0], n)
        self.visible = causal_visibility(positions, slot_positions)
