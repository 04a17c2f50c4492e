"""Chapter 3's oracle check on the real SmolLM2 weights: the hand-written model's logits against
the Hugging Face model's on several prompts in one batch, and the same greedy choices.

To stay fast on a shared CPU the greedy check is teacher-forced: HF `generate` makes each
continuation, then one batched forward of our model over prompt + continuation must pick every one
of those tokens; then the engine's real token-by-token loop, for fewer tokens."""

from __future__ import annotations

import pytest

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch03_model.engine import ModelEngine
from chapters.ch03_model.model import from_hf, parameter_count
from chapters.ch03_model.oracle import compare_logits
from shared.config import PROMPT
from shared.contracts import SamplingParams
from shared.model import load_model

PROMPTS = [
    PROMPT,
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
]
# float32 on both sides, different summation orders: logits of magnitude ~20-35 agree to ~1e-4.
TOLERANCE = 1e-3
NEW_TOKENS = 12
ENGINE_TOKENS = 4
ENGINE_PROMPTS = PROMPTS[1:3]  # the shorter ones: without a cache every step reruns the prompt


@pytest.fixture(scope="module")
def loaded():
    return load_model(device="cpu")


@pytest.fixture(scope="module")
def model(loaded):
    return from_hf(loaded.model)


def test_parameter_count_is_the_models(model, loaded) -> None:
    assert parameter_count(model) == loaded.manifest["parameters"] == 134_515_008


@pytest.fixture(scope="module")
def continuations(loaded) -> list[list[int]]:
    """HF generate's greedy continuations (with its KV cache: fast)."""
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    return [r.output_ids for r in BaselineEngine(loaded).generate_batch(PROMPTS, params)]


def test_logits_and_greedy_choices_match_transformers(model, loaded, continuations) -> None:
    prompts = [loaded.tokenizer.encode(p) for p in PROMPTS]
    sequences = [p + c for p, c in zip(prompts, continuations)]
    results = compare_logits(model, loaded.model, sequences, pad_id=loaded.eos_token_id)
    for prompt, cont, result in zip(prompts, continuations, results):
        assert result.max_abs_diff < TOLERANCE, result
        assert result.max_abs_logit > 10, result  # a real model's scale: the tolerance means something
        assert result.argmax_agree == 1.0, result
        # Our top token after the prompt and after each generated token is HF's next token.
        assert result.top_tokens[len(prompt) - 1 : -1] == cont


def test_engine_greedy_tokens_identical_to_hf_generate(loaded, continuations) -> None:
    """The real token-by-token loop (chapter 2's, over our model), a few tokens per prompt."""
    params = SamplingParams(temperature=0.0, max_tokens=ENGINE_TOKENS, ignore_eos=True)
    results = ModelEngine(loaded).generate_batch(ENGINE_PROMPTS, params)
    for prompt, result, cont in zip(ENGINE_PROMPTS, results, continuations[1:3]):
        assert result.output_ids == cont[:ENGINE_TOKENS], prompt
