"""A contiguous, preallocated KV cache: chapter 3's attention backend with a memory.

Without a cache, every decode step runs the whole sequence through the model again, because
attention at the newest position needs the keys and values of every earlier one. But those keys
and values never change: position p's key depends only on the tokens up to p. So compute them
once, keep them, and feed the model only the newest token.

The layout is the simplest that works: per layer one tensor of keys and one of values,
[rows, kv_heads, max_len, head_dim], allocated once for the request's whole life (prompt plus
max_tokens), and **slot s holds position s**. Writing is a copy into the slots named by
`positions`; attention reads slots [0, n) where n is the furthest position written.

The cache is also a source of silent bugs: attention happily reads whatever the slots hold. So the
cache keeps count of how many positions each row holds and refuses a write that is not the next
one (`CacheMisuseError`): reusing a cache for a second prompt, skipping a position or writing one
twice fails loudly instead of producing plausible, wrong text (04_misuse.py measures how wrong).
"""

from __future__ import annotations

import torch
from torch import Tensor

from chapters.ch03_model.model import Llama, ModelConfig, attend, causal_visibility


class CacheMisuseError(RuntimeError):
    pass


def kv_bytes_per_token(cfg: ModelConfig, dtype: torch.dtype) -> int:
    """Keys and values of one position, across all layers: layers x 2 x kv_heads x head_dim x bytes."""
    return cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * torch.finfo(dtype).bits // 8


class KVCache:
    """Chapter 3's attention-backend interface (`forward(layer, q, k, v, positions)`) over a
    preallocated cache for `rows` sequences of at most `max_len` positions each."""

    def __init__(
        self,
        layers: int,
        rows: int,
        kv_heads: int,
        head_dim: int,
        max_len: int,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        for name, size in (("layers", layers), ("rows", rows), ("kv_heads", kv_heads),
                           ("head_dim", head_dim), ("max_len", max_len)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"KVCache: {name} must be an integer >= 1, got {size!r}")
        shape = (rows, kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.max_len = max_len
        # Positions each row holds: the guard against reading keys that belong to someone else.
        self.lengths = torch.zeros(rows, dtype=torch.long)
        # The tokens whose keys row 0 holds, recorded by the engine: the cache itself only ever
        # sees keys, and keys do not say which tokens they came from (KVCacheEngine's guard).
        self.token_ids: list[int] = []
        self.visible = torch.zeros(rows, 1, 0, dtype=torch.bool, device=device)
        self.index = torch.zeros(rows, 1, 0, 1, dtype=torch.long, device=device)

    @classmethod
    def for_model(cls, model: Llama, rows: int, max_len: int) -> KVCache:
        cfg, weight = model.config, model.embed_tokens.weight
        return cls(cfg.num_layers, rows, cfg.num_kv_heads, cfg.head_dim, max_len,
                   weight.device, weight.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes allocated (keys and values, all layers, all slots)."""
        return 2 * sum(k.numel() * k.element_size() for k in self.keys)

    def reset(self) -> None:
        """Forget every row: the only legitimate way to reuse a cache for new sequences."""
        self.lengths.zero_()
        self.token_ids = []

    def forward(self, layer: int, q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
        if layer == 0:  # every layer writes the same slots and sees the same ones: plan it once
            self._plan(positions)
        index = self.index.expand(-1, k.shape[1], -1, k.shape[3])
        self.keys[layer].scatter_(2, index, k)
        self.values[layer].scatter_(2, index, v)
        n = self.visible.shape[-1]
        return attend(q, self.keys[layer][:, :, :n], self.values[layer][:, :, :n], self.visible)

    def _plan(self, positions: Tensor) -> None:
        """Check that this call writes each row's next positions, in order, then work out where the
        keys go ([B, 1, T, 1] slot indices) and which slots each query sees ([B, T, n])."""
        self._claim(positions.cpu())
        n = int(positions.max().item()) + 1
        self.index = positions[:, None, :, None]
        slots = torch.arange(n, device=positions.device).expand(positions.shape[0], n)
        self.visible = causal_visibility(positions, slots)

    def _claim(self, positions: Tensor) -> None:
        """Check that each row writes its next positions, then count them as held."""
        rows, width = positions.shape
        if rows != self.lengths.shape[0]:
            raise CacheMisuseError(f"this cache holds {self.lengths.shape[0]} rows, got {rows}")
        expected = self.lengths[:, None] + torch.arange(width)
        if not torch.equal(positions, expected):
            row = int((positions != expected).any(dim=1).nonzero()[0])
            raise CacheMisuseError(
                f"row {row} holds {int(self.lengths[row])} positions, so the next write must be "
                f"positions {expected[row].tolist()}, got {positions[row].tolist()} (a cache "
                "reused for another prompt, or a skipped or repeated position); call reset() "
                "to start a new sequence"
            )
        if int(expected[:, -1].max()) >= self.max_len:
            raise CacheMisuseError(f"position {int(expected[:, -1].max())} is past max_len={self.max_len}")
        self.lengths += width
