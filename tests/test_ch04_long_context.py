"""Chapter 4 at the end of the context, on the tiny random model (context 512): a 480-token prompt
and 31 new tokens, 511 of 512 positions, against chapter 3's model without a cache."""

from __future__ import annotations

import torch

from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch04_kv_cache.proof import cached_greedy, reference_logits
from shared.contracts import SamplingParams
from shared.model import tiny_model


def test_cache_filling_the_context_matches_uncached_model() -> None:
    engine = KVCacheEngine(tiny_model(seed=5))
    prompt = torch.randint(0, 40000, (480,), generator=torch.Generator().manual_seed(0)).tolist()
    n = engine.max_context - len(prompt) - 1
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    out, steps = cached_greedy(engine, prompt, n)
    ref = reference_logits(engine, prompt, out)
    assert (steps - ref).abs().max().item() < 1e-4
    assert ref.argmax(-1).tolist() == out
    assert engine.generate(prompt, params).output_ids == out
