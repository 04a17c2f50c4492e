"""The KV cache of a static batch (chapter 5): chapter 4's cache, taught about padding and growth.

Chapter 4's `KVCache` already holds several rows and already follows the rule that makes batching
easy: **row r's slot s holds the key and value of row r's position s.** Two things change when
the rows come from a padded batch:

* **Padding.** A padding slot has position -1. It must be written nowhere (its key goes to one
  spare slot past the end, which attention never reads) and counted nowhere (chapter 4's guard,
  which insists that every row writes exactly its next positions, now skips padding). Each row's
  keys then sit exactly where its solo run would put them, and causal visibility by position
  (`causal_visibility`) hides everything else: slots a shorter row has not reached, the spare slot,
  and nothing at all for a finished row, which the engine feeds as padding.
* **Growth.** Chapter 4 allocates a request's whole life (prompt + max_tokens) up front. A batch of
  server requests, each allowed up to the context by default, would reserve gigabytes it rarely
  uses; this cache starts at the prompt's width and doubles when a write needs more, up to the
  longest row's prompt + max_tokens (`limit`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from chapters.ch03_model.model import Llama, causal_visibility
from chapters.ch04_kv_cache.cache import CacheMisuseError, KVCache


class BatchKVCache(KVCache):
    """`rows` sequences, `capacity` slots each to start with (plus the spare slot), growing up to
    `limit` slots."""

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
        super().__init__(layers, rows, kv_heads, head_dim, capacity + 1, device, dtype)
        self.limit = limit  # no row ever needs more slots than this

    @classmethod
    def for_model(cls, model: Llama, rows: int, capacity: int, limit: int) -> BatchKVCache:  # type: ignore[override]
        cfg, weight = model.config, model.embed_tokens.weight
        return cls(cfg.num_layers, rows, cfg.num_kv_heads, cfg.head_dim, capacity, limit,
                   weight.device, weight.dtype)

    @property
    def capacity(self) -> int:
        """Slots per row for real positions (the last of `max_len` is the spare slot)."""
        return self.max_len - 1

    @property
    def bytes_per_row(self) -> int:
        """Bytes one row's region holds now (keys and values, every layer, spare slot excluded)."""
        return self.nbytes * self.capacity // (self.max_len * self.lengths.shape[0])

    def ensure(self, slots: int) -> None:
        """Make room for positions [0, slots): double (capped at `limit`), copying what is stored.
        Amortised, a row's keys are copied about once."""
        if slots <= self.capacity:
            return
        if slots > self.limit:
            raise CacheMisuseError(f"position {slots - 1} is past this batch's limit of {self.limit} slots")
        new = min(max(slots, 2 * self.capacity), self.limit)
        for cache in (self.keys, self.values):
            for layer, old in enumerate(cache):
                grown = old.new_zeros(old.shape[0], old.shape[1], new + 1, old.shape[3])
                grown[:, :, : self.capacity] = old[:, :, : self.capacity]
                cache[layer] = grown
        self.max_len = new + 1

    def _plan(self, positions: Tensor) -> None:
        """Chapter 4's plan, with padding sent to the spare slot and the cache grown first."""
        self._claim(positions.cpu())
        n = int(positions.max().item()) + 1
        self.ensure(n)
        self.index = torch.where(positions >= 0, positions, self.capacity)[:, None, :, None]
        slots = torch.arange(n, device=positions.device).expand(positions.shape[0], n)
        self.visible = causal_visibility(positions, slots)

    def _claim(self, positions: Tensor) -> None:
        """Chapter 4's guard for a padded batch: each row's real (non-negative) positions must be
        its next ones, in order; padding is neither checked nor counted."""
        real = positions >= 0
        expected = self.lengths[:, None] + real.cumsum(dim=1) - 1
        wrong = real & (positions != expected)
        if wrong.any():
            row = int(wrong.any(dim=1).nonzero()[0])
            raise CacheMisuseError(
                f"row {row} holds {int(self.lengths[row])} positions, so its next real positions "
                f"must continue from there; got {positions[row].tolist()} (-1 is padding)"
            )
        held = self.lengths + real.sum(dim=1)
        if int(held.max()) > self.limit:
            raise CacheMisuseError(f"position {int(held.max()) - 1} is past this batch's limit of {self.limit} slots")
        self.lengths = held
