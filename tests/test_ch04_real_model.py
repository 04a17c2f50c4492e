"""Chapter 4 on the real SmolLM2 weights: the cached engine's greedy tokens and per-step logits
against chapter 3's model without a cache, on several prompts, one of them 636 tokens long
(02_proof.py runs a 7,000-token prompt; the tiny-model suite fills its whole context).

Chapter 3's side is teacher-forced: one uncached pass over prompt + continuation gives, position by
position, the logits its own loop would compute at each step (the model is causal)."""

from __future__ import annotations

import pytest

from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch04_kv_cache.proof import cached_greedy, reference_logits
from shared.config import PROMPT
from shared.contracts import SamplingParams
from shared.model import load_model

TOLERANCE = 1e-3  # float32; logits are tens
LONG = ", ".join(str(i) for i in range(1, 150)) + ","  # 636 tokens of counting
CASES = [(PROMPT, 16), ("The capital of France is", 16), ("def fibonacci(n):", 12),
         ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", 12), (LONG, 6)]


@pytest.fixture(scope="module")
def engine() -> KVCacheEngine:
    return KVCacheEngine(load_model(device="cpu"))


@pytest.mark.parametrize("text,n", CASES, ids=["bee", "france", "code", "chat", "long"])
def test_cached_steps_match_uncached_model(engine, text: str, n: int) -> None:
    prompt = engine.encode(text)
    out, steps = cached_greedy(engine, prompt, n)
    ref = reference_logits(engine, prompt, out)
    diff = (steps - ref).abs().max().item()
    assert diff < TOLERANCE, f"max |cached - uncached| {diff:.2e}"
    assert ref.argmax(-1).tolist() == out  # chapter 3 would have chosen every one of these tokens
    # And the engine's public path gives the same tokens.
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    assert engine.generate(prompt, params).output_ids == out
