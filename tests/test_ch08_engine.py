"""Chapter 8's engine against chapter 7's, on the CPU through Triton's interpreter: the flash
kernel's prefill writes the same cache and gives the same logits (within 1e-5 relative, float32)
and the same greedy tokens on several prompts; its backend refuses what it cannot serve."""

from __future__ import annotations

from chapters.ch07_triton.interpret import KERNEL_DEVICE  # noqa: F401  (sets the interpreter first)

import pytest
import torch

from chapters.ch06_profiling.graph import StaticKVCache
from chapters.ch07_triton.check import rel_err
from chapters.ch07_triton.engine import TritonEngine
from chapters.ch08_flash_attention.engine import FlashAttentionEngine, FlashPrefillAttention
from shared.contracts import SamplingParams
from shared.model import tiny_model

PROMPTS = ["According to all known laws of aviation", "The capital of France is", "1, 2, 3,"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def engines() -> tuple[TritonEngine, FlashAttentionEngine]:
    tiny = tiny_model(seed=1, layers=1)
    return (TritonEngine(tiny, min_cache_len=16, kernels=True),
            FlashAttentionEngine(tiny, min_cache_len=16, kernels=True))


def test_prefill_logits_and_cache_match_chapter_7(engines) -> None:
    ch07, ch08 = engines
    for prompt in PROMPTS:
        ids = ch07.encode(prompt)
        a_step, b_step = ch07.new_step(16), ch08.new_step(16)
        with torch.inference_mode():
            a, b = a_step.prefill(ids), b_step.prefill(ids)
        assert rel_err(b, a) < 1e-5
        assert int(b.argmax()) == int(a.argmax())
        n = len(ids)
        assert torch.equal(b_step.cache.keys[..., :n, :], a_step.cache.keys[..., :n, :])


def test_greedy_tokens_identical_to_chapter_7(engines) -> None:
    ch07, ch08 = engines
    for a, b in zip(ch07.generate_batch(PROMPTS, GREEDY), ch08.generate_batch(PROMPTS, GREEDY)):
        assert b.output_ids == a.output_ids
    assert "flash-attention kernel" in ch08.implementation


def test_backend_refuses_gaps_and_overflow() -> None:
    backend = FlashPrefillAttention(StaticKVCache(1, 2, 16, 8, "cpu", torch.float32))
    q, kv = torch.zeros(1, 4, 3, 16), torch.zeros(1, 2, 3, 16)
    with pytest.raises(ValueError, match="consecutive"):
        backend.forward(0, q, kv, kv, torch.tensor([[0, 2, 3]]))
    with pytest.raises(ValueError, match="do not fit"):
        backend.forward(0, q, kv, kv, torch.tensor([[6, 7, 8]]))
    with pytest.raises(ValueError, match="batch of 2"):
        backend.forward(0, q.expand(2, -1, -1, -1), kv, kv, torch.tensor([[0, 1, 2]] * 2))
