"""Chapter 4: the KV cache changes how much is computed, never what.

Differential tests against chapter 3 (the same model without a cache): greedy tokens identical and
logits within a stated tolerance, on several prompts and lengths, on the tiny random model; the
real model on a few prompts including one that fills most of its context lives in
test_ch04_real_model.py. And the guard: misuse of a cache raises instead of silently attending to
someone else's keys.
"""

from __future__ import annotations

import pytest
import torch

from chapters.ch03_model.engine import ModelEngine
from chapters.ch03_model.model import NoCacheAttention
from chapters.ch04_kv_cache.cache import CacheMisuseError, KVCache, kv_bytes_per_token
from chapters.ch04_kv_cache.engine import KVCacheEngine
from shared.contracts import SamplingParams
from shared.model import tiny_model

# fp32 on the CPU: cached and uncached attention sum the same products in a different order.
LOGIT_ATOL = 1e-4


@pytest.fixture(scope="module")
def engines() -> tuple[ModelEngine, KVCacheEngine]:
    loaded = tiny_model(seed=4)
    return ModelEngine(loaded), KVCacheEngine(loaded)


PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog", "1 2 3 4 5 6 7 8 9 10 11 12"]


@pytest.mark.parametrize("max_tokens", [1, 7, 40])
def test_greedy_tokens_identical_to_chapter_3(engines, max_tokens: int) -> None:
    no_cache, cached = engines
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for prompt in PROMPTS:
        assert cached.generate(prompt, params).output_ids == no_cache.generate(prompt, params).output_ids


def test_sampled_tokens_identical_to_chapter_3(engines) -> None:
    no_cache, cached = engines
    for seed in (1, 2, 3):
        params = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seed=seed, ignore_eos=True)
        assert cached.generate(PROMPTS[1], params).output_ids == no_cache.generate(PROMPTS[1], params).output_ids


def test_logits_at_every_step_match_the_uncached_model(engines) -> None:
    _, cached = engines
    model = cached.model
    ids = cached.encode(PROMPTS[1]) + cached.encode(PROMPTS[2])
    cache = KVCache.for_model(model, rows=1, max_len=len(ids))
    with torch.inference_mode():
        full = model(torch.tensor([ids]), torch.arange(len(ids))[None], NoCacheAttention())[0]
        prefill = 5
        steps = [model(torch.tensor([ids[:prefill]]), torch.arange(prefill)[None], cache)[0]]
        for p in range(prefill, len(ids)):
            steps.append(model(torch.tensor([[ids[p]]]), torch.tensor([[p]]), cache)[0])
    diff = (torch.cat(steps) - full).abs().max().item()
    assert diff < LOGIT_ATOL, f"max |cached - uncached| = {diff:.2e} (magnitude {full.abs().max():.1f})"


def test_metrics_report_cache_bytes_and_positions(engines) -> None:
    _, cached = engines
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    ids = cached.encode(PROMPTS[1])
    result = cached.generate(ids, params)
    per_token = kv_bytes_per_token(cached.model.config, torch.float32)
    assert result.metrics.kv_cache_bytes == per_token * (len(ids) + 10 - 1)
    # The prompt once, then one position per decode step.
    assert result.metrics.positions_processed == len(ids) + 9


def test_bytes_per_token_formula() -> None:
    from chapters.ch03_model.model import ModelConfig

    cfg = ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                      num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5,
                      rope_theta=1e5, max_position_embeddings=8192, tie_word_embeddings=True)
    assert kv_bytes_per_token(cfg, torch.bfloat16) == 30 * 2 * 3 * 64 * 2 == 23040


def test_reusing_a_cache_for_another_prompt_raises(engines) -> None:
    _, cached = engines
    model = cached.model
    cache = KVCache.for_model(model, rows=1, max_len=32)
    with torch.inference_mode():
        model(torch.tensor([[5, 6, 7]]), torch.arange(3)[None], cache)
        with pytest.raises(CacheMisuseError, match="reused for another prompt"):
            model(torch.tensor([[8, 9]]), torch.arange(2)[None], cache)  # a new prompt at 0
        with pytest.raises(CacheMisuseError, match="next write must be positions"):
            model(torch.tensor([[8]]), torch.tensor([[5]]), cache)  # skips positions 3 and 4
        cache.reset()
        model(torch.tensor([[8, 9]]), torch.arange(2)[None], cache)  # legitimate after reset


def test_writing_past_the_end_raises(engines) -> None:
    _, cached = engines
    cache = KVCache.for_model(cached.model, rows=1, max_len=2)
    with torch.inference_mode(), pytest.raises(CacheMisuseError, match="past max_len"):
        cached.model(torch.tensor([[1, 2, 3]]), torch.arange(3)[None], cache)


@pytest.mark.parametrize("name", ["layers", "rows", "kv_heads", "head_dim", "max_len"])
def test_bad_cache_sizes_rejected(name: str) -> None:
    sizes = {"layers": 2, "rows": 1, "kv_heads": 2, "head_dim": 16, "max_len": 4, name: 0}
    with pytest.raises(ValueError, match=name):
        KVCache(**sizes, device="cpu", dtype=torch.float32)
