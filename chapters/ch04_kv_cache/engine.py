"""Chapter 4's engine: chapter 3's model and loop, with a KV cache.

Two hooks of chapter 2's loop change, nothing else:

* `new_sequence` gives each request its own `KVCache`, preallocated for the prompt plus
  max_tokens (so a step never allocates, and a request that does not fit fails before it starts);
* `next_logits` feeds the model only what the cache does not hold yet: the whole prompt on the
  first step (the prefill), then one token per step (decode). Each decode step now does the same
  work whatever the length, apart from attention over the cached keys.

The model file does not change: the cache is the attention backend chapter 3's model takes as an
argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from chapters.ch02_generate_loop.engine import Sequence
from chapters.ch03_model.engine import ModelEngine
from chapters.ch04_kv_cache.cache import CacheMisuseError, KVCache, kv_bytes_per_token
from shared.contracts import RequestMetrics, SamplingParams


@dataclass
class CachedSequence(Sequence):
    """A request plus the cache holding its keys and values (`cache.lengths[0]` positions)."""

    cache: KVCache | None = None


class KVCacheEngine(ModelEngine):
    name = "ch04_kv_cache"
    implementation = "ch03 hand-written Llama (PyTorch), contiguous KV cache"

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.model.config, self.dtype)

    def new_sequence(
        self, prompt_ids: list[int], params: SamplingParams, metrics: RequestMetrics
    ) -> CachedSequence:
        # The last selected token is never fed back, so prompt + max_tokens - 1 slots suffice.
        slots = len(prompt_ids) + params.max_tokens - 1
        cache = KVCache.for_model(self.model, rows=1, max_len=slots)
        metrics.kv_cache_bytes = cache.nbytes
        return CachedSequence(list(prompt_ids), len(prompt_ids), cache)

    def next_logits(self, seq: CachedSequence) -> tuple[torch.Tensor, int]:
        """Run the positions the cache does not hold yet (the prompt, then one token at a time)."""
        assert seq.cache is not None
        start = int(seq.cache.lengths[0])
        # The guard: a cache may serve this sequence only if it holds keys of this sequence's own
        # first tokens. The cache's position check cannot see a cache handed to another request
        # whose prompt is longer: the next positions line up, the keys belong to someone else.
        if seq.cache.token_ids != seq.token_ids[:start]:
            raise CacheMisuseError(
                f"this cache holds keys for {start} tokens that are not this request's first "
                f"{start} tokens: a cache reused for another prompt; give each request its own "
                "cache (or reset() it)"
            )
        new = seq.token_ids[start:]
        ids = torch.tensor([new], device=self.device)
        positions = torch.arange(start, start + len(new), device=self.device)[None]
        logits = self.model(ids, positions, seq.cache, last_only=True)[0, -1]
        seq.cache.token_ids.extend(new)
        return logits, len(new)
