"""Chapter 4 at the end of the context, on the tiny random model (context 512): a 480-token prompt
and 31 new tokens, 511 of 512 positions, against chapter 3's model without a cache."""

from __future__ import annotations

import torch

from chapters.ch03_model.model import NoCacheAttention
from chapters.ch04_kv_cache.engine import KVCacheEngine
from shared.contracts import RequestMetrics, SamplingParams
from shared.model import tiny_model


def test_cache_filling_the_context_matches_uncached_model() -> None:
    engine = KVCacheEngine(tiny_model(seed=5))
    prompt = torch.randint(0, 40000, (480,), generator=torch.Generator().manual_seed(0)).tolist()
    n = engine.max_context - len(prompt) - 1
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    seq = engine.new_sequence(prompt, params, RequestMetrics())
    out, steps = [], []
    with torch.inference_mode():
        for _ in range(n):
            logits, _ = engine.next_logits(seq)
            steps.append(logits)
            out.append(int(logits.argmax()))
            seq.token_ids.append(out[-1])
        ids = torch.tensor([prompt + out[:-1]])
        ref = engine.model(ids, torch.arange(ids.shape[1])[None], NoCacheAttention())[0, len(prompt) - 1 :]
    assert (torch.stack(steps) - ref).abs().max().item() < 1e-4
    assert ref.argmax(-1).tolist() == out
    assert engine.generate(prompt, params).output_ids == out
