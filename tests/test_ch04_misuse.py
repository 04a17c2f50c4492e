"""Chapter 4's engine guard: a cache handed to a request whose first tokens it does not hold is an
error; the legitimate reuses (after reset, or of the request's own prefix) give the fresh tokens."""

from __future__ import annotations

import pytest
import torch

from chapters.ch04_kv_cache.cache import CacheMisuseError
from chapters.ch04_kv_cache.engine import CachedSequence, KVCacheEngine
from shared.contracts import RequestMetrics, SamplingParams
from shared.model import tiny_model

PARAMS = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def engine() -> KVCacheEngine:
    return KVCacheEngine(tiny_model(seed=3))


def _greedy(engine: KVCacheEngine, seq: CachedSequence, n: int) -> list[int]:
    out = []
    with torch.inference_mode():
        for _ in range(n):
            out.append(int(engine.next_logits(seq)[0].argmax()))
            seq.token_ids.append(out[-1])
    return out


def test_cache_of_another_prompt_is_refused(engine) -> None:
    a = engine.new_sequence(engine.encode("The capital of France is"), PARAMS, RequestMetrics())
    _greedy(engine, a, 3)
    b_ids = engine.encode("According to all known laws of aviation, there is no way")
    assert len(b_ids) > int(a.cache.lengths[0])  # the positions line up: only the tokens are wrong
    with pytest.raises(CacheMisuseError, match="reused for another prompt"):
        engine.next_logits(CachedSequence(b_ids, len(b_ids), a.cache))


def test_reuse_after_reset_and_of_own_prefix_gives_fresh_tokens(engine) -> None:
    ids = engine.encode("According to all known laws of aviation, there is no way")
    fresh = _greedy(engine, engine.new_sequence(ids, PARAMS, RequestMetrics()), 6)
    room = SamplingParams(temperature=0.0, max_tokens=32)  # slots for the longer request too
    prefix = engine.new_sequence(ids[:4], room, RequestMetrics())
    with torch.inference_mode():
        engine.next_logits(prefix)
    assert _greedy(engine, CachedSequence(list(ids), len(ids), prefix.cache), 6) == fresh
    prefix.cache.reset()
    assert _greedy(engine, CachedSequence(list(ids), len(ids), prefix.cache), 6) == fresh
