"""Chapter 3's oracle check on the real SmolLM2 weights: the hand-written model's logits against
the Hugging Face model's on several prompts in one batch, and the same greedy choices.

To stay fast on a shared CPU the greedy check is teacher-forced: HF `generate` makes each
continuation, then one batched forward of our model over prompt + continuation must pick every one
of those tokens (tests/test_ch03_engine.py runs the real token-by-token loop)."""

from __future__ import annotations

import pytest

from chapters.ch01_baseline.engine import BaselineEngine
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


@pytest.fixture(scope="module")
def loaded():
    return load_model(device="cpu")


@pytest.fixture(scope="module")
def model(loaded):
    return from_hf(loaded.model)


def test_parameter_count_is_the_models(model, loaded) -> None:
    assert parameter_count(model) == loaded.manifest["parameters"] == 134_515_008


def test_logits_and_greedy_choices_match_transformers(model, loaded) -> None:
    baseline = BaselineEngine(loaded)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    prompts = [loaded.tokenizer.encode(p) for p in PROMPTS]
    continuations = [baseline.generate(p, params).output_ids for p in prompts]
    sequences = [p + c for p, c in zip(prompts, continuations)]
    results = compare_logits(model, loaded.model, sequences, pad_id=loaded.eos_token_id)
    for prompt, cont, result in zip(prompts, continuations, results):
        assert result.max_abs_diff < TOLERANCE, result
        assert result.max_abs_logit > 10, result  # a real model's scale: the tolerance means something
        assert result.argmax_agree == 1.0, result
        # Our top token after the prompt and after each generated token is HF's next token.
        assert result.top_tokens[len(prompt) - 1 : -1] == cont
