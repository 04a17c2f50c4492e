"""Chapter 6's static decode step on a tiny random Llama: the step a CUDA graph would record gives
the logits of chapter 3's full recomputation, across bucket sizes and after reuse by another
request; bad use is a clear error. (Capture itself needs a GPU: gpu_benchmark.py checks it.)"""

from __future__ import annotations

import pytest
import torch

from chapters.ch03_model.model import NoCacheAttention, from_hf
from chapters.ch06_profiling.graph import DecodeStep, StaticKVCache, bucket
from shared.model import tiny_model

TOLERANCE = 1e-5  # float32 rounding: logits of magnitude ~1 agree to ~1e-7


@pytest.fixture(scope="module")
def model():
    return from_hf(tiny_model(seed=0).model)


def full_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids]), torch.arange(len(ids))[None], NoCacheAttention())[0, -1]


@torch.inference_mode()
def run(step: DecodeStep, model, prompt: list[int], steps: int) -> tuple[list[int], float]:
    """Greedy decode through the static step; the largest logit difference from recomputing the
    whole sequence without a cache at every step."""
    seq = list(prompt)
    logits = step.prefill(seq)
    worst = 0.0
    for _ in range(steps):
        worst = max(worst, (logits - full_logits(model, seq)).abs().max().item())
        seq.append(int(logits.argmax()))
        logits = step(seq[-1], len(seq) - 1)
    return seq[len(prompt):], worst


@pytest.mark.parametrize("max_len", [32, 256])
def test_static_step_matches_full_recomputation(model, max_len):
    step = DecodeStep(model, StaticKVCache.for_model(model, max_len))
    for prompt in ([5, 77, 300, 12, 9], [1000, 2, 3]):
        tokens, worst = run(step, model, prompt, steps=20)
        assert worst < TOLERANCE
        assert len(tokens) == 20


def test_reused_cache_gives_the_same_tokens_as_a_fresh_one(model):
    """Slots left over from a longer earlier request are masked, never seen."""
    used = DecodeStep(model, StaticKVCache.for_model(model, 64))
    run(used, model, list(range(100, 140)), steps=10)  # fills slots 0..49
    fresh = DecodeStep(model, StaticKVCache.for_model(model, 64))
    assert run(used, model, [7, 8, 9], 12)[0] == run(fresh, model, [7, 8, 9], 12)[0]


def test_position_past_the_cache_is_an_error(model):
    step = DecodeStep(model, StaticKVCache.for_model(model, 16))
    with torch.inference_mode():
        step.prefill([1, 2, 3])
        with pytest.raises(ValueError, match="position 16 is past the cache's 16 slots"):
            step(4, 16)


def test_static_cache_holds_one_sequence(model):
    cache = StaticKVCache.for_model(model, 16)
    with torch.inference_mode(), pytest.raises(ValueError, match="holds one sequence"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.arange(3).expand(2, 3), cache)


def test_buckets_are_powers_of_two_from_256():
    assert [bucket(n) for n in (1, 256, 257, 600, 8192)] == [256, 256, 512, 1024, 8192]
    cache = StaticKVCache(layers=30, kv_heads=3, head_dim=64, max_len=256, device="cpu",
                          dtype=torch.bfloat16)
    assert cache.nbytes == 30 * 2 * 3 * 64 * 256 * 2  # 23,040 bytes per position in bf16


@pytest.mark.parametrize("smallest", [0, -4, 100, True])
def test_bucket_refuses_a_smallest_that_is_not_a_power_of_two(smallest) -> None:
    with pytest.raises(ValueError, match="smallest"):  # 0 used to loop forever
        bucket(10, smallest)


@pytest.mark.parametrize("name", ["layers", "kv_heads", "head_dim", "max_len"])
def test_static_cache_refuses_empty_sizes(name: str) -> None:
    sizes = {"layers": 1, "kv_heads": 1, "head_dim": 16, "max_len": 16, name: 0}
    with pytest.raises(ValueError, match=name):
        StaticKVCache(**sizes, device="cpu", dtype=torch.float32)
