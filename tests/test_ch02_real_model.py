"""Chapter 2's proof on the real model: its own loop, greedy, says exactly what chapter 1's
`generate()` says, token for token, on several prompts (several requests through generate_batch)."""

from __future__ import annotations


import pytest

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from shared import config
from shared.contracts import SamplingParams
from shared.model import LoadedModel, load_model

PROMPTS = [
    config.PROMPT,
    "The capital of France is",
    "def fibonacci(n):",
    "Bees make honey because",
]


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    return load_model()


def test_greedy_tokens_equal_chapter_1(loaded: LoadedModel) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    ours = GenerateLoopEngine(loaded).generate_batch(PROMPTS, params)
    theirs = BaselineEngine(loaded).generate_batch(PROMPTS, params)
    for prompt, a, b in zip(PROMPTS, ours, theirs):
        assert a.output_ids == b.output_ids, f"{prompt!r}: ch02 {a.output_ids} vs ch01 {b.output_ids}"
        assert a.text == b.text
    # Without a cache, step t runs the prompt and t earlier outputs again.
    for prompt, r in zip(PROMPTS, ours):
        n = len(loaded.tokenizer.encode(prompt, add_special_tokens=False))
        assert r.metrics.positions_processed == sum(n + t for t in range(10))
