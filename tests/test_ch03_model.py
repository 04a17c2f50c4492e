"""Chapter 3 on a tiny random Llama (fast): the hand-written model against transformers' Llama,
batches, padding, GQA arithmetic, and the weight loader's errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch03_model.model import (
    Llama,
    ModelConfig,
    NoCacheAttention,
    WeightLoadError,
    attend,
    causal_visibility,
    from_hf,
    load_weights,
)
from chapters.ch03_model.oracle import compare_logits, greedy_tokens, left_pad
from shared.contracts import SamplingParams
from shared.model import tiny_model

PROMPTS = [
    "According to all known laws of aviation",
    "The capital of France is",
    "def fibonacci(n):",
    "1, 2, 3, 4,",
    "Once upon a time, in a small village by the sea, there lived",
]
# Random tiny weights give logits of magnitude ~1; float32 rounding differences are ~1e-7.
TINY_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def tiny():
    return tiny_model(seed=0)


@pytest.fixture(scope="module")
def model(tiny):
    return from_hf(tiny.model)


def test_config_read_from_hf(tiny) -> None:
    cfg = ModelConfig.from_hf(tiny.model.config)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rope_theta) == (4, 2, 16, 100000.0)
    assert cfg.tie_word_embeddings


def test_logits_match_transformers(model, tiny) -> None:
    prompts = [tiny.tokenizer.encode(p) for p in PROMPTS]
    for result in compare_logits(model, tiny.model, prompts, pad_id=tiny.eos_token_id):
        assert result.max_abs_diff < TINY_TOLERANCE, result
        assert result.argmax_agree == 1.0, result


def test_greedy_tokens_match_hf_generate_batched(model, tiny) -> None:
    """All prompts (different lengths) in one left-padded batch, against HF generate one by one."""
    prompts = [tiny.tokenizer.encode(p) for p in PROMPTS]
    ours = greedy_tokens(model, prompts, 8, pad_id=tiny.eos_token_id)
    baseline = BaselineEngine(tiny)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    for prompt, row in zip(prompts, ours):
        assert row == baseline.generate(prompt, params).output_ids


@torch.inference_mode()
def test_left_padded_rows_equal_their_solo_runs(model, tiny) -> None:
    prompts = [tiny.tokenizer.encode(p) for p in PROMPTS[:3]]
    ids, positions = left_pad(prompts, pad_id=0)
    batch = model(ids, positions, NoCacheAttention())
    for row, prompt in enumerate(prompts):
        solo = model(torch.tensor([prompt]), torch.arange(len(prompt))[None], NoCacheAttention())
        real = batch[row, ids.shape[1] - len(prompt) :]
        torch.testing.assert_close(real, solo[0], atol=TINY_TOLERANCE, rtol=0)
        assert torch.isfinite(batch[row]).all()  # padding rows are junk, but never NaN


@torch.inference_mode()
def test_same_length_batch_equals_hf_batch(model, tiny) -> None:
    ids = torch.randint(0, 1000, (3, 12), generator=torch.Generator().manual_seed(1))
    ours = model(ids, torch.arange(12).expand(3, 12), NoCacheAttention())
    torch.testing.assert_close(ours, tiny.model(ids).logits, atol=TINY_TOLERANCE, rtol=0)


def test_grouped_query_attention_equals_sdpa() -> None:
    """`attend` shares each KV head among its group without copying; SDPA repeats them."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 9, 7, 64, generator=gen)
    k = torch.randn(2, 3, 7, 64, generator=gen)
    v = torch.randn(2, 3, 7, 64, generator=gen)
    positions = torch.arange(7).expand(2, 7)
    ours = attend(q, k, v, causal_visibility(positions, positions))
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), is_causal=True)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


def test_causal_visibility_by_position_hides_padding() -> None:
    positions = torch.tensor([[-1, -1, 0, 1]])
    visible = causal_visibility(positions, positions)[0]
    assert visible[3].tolist() == [False, False, True, True]
    assert visible[2].tolist() == [False, False, True, False]
    assert not visible[0].any()  # a padding query sees nothing (and gets finite junk)


def test_wrong_input_shapes_are_refused(model) -> None:
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long), NoCacheAttention())


# ---- the loader's errors -------------------------------------------------------------------------


def _fresh(tiny) -> Llama:
    return Llama(ModelConfig.from_hf(tiny.model.config))


def test_missing_tensor_is_named(tiny) -> None:
    state = dict(tiny.model.state_dict())
    del state["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(WeightLoadError, match=r"no tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_weights(_fresh(tiny), state)


def test_misshaped_tensor_is_named_with_both_shapes(tiny) -> None:
    state = dict(tiny.model.state_dict())
    state["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(64, 64)
    with pytest.raises(WeightLoadError, match=r"k_proj\.weight' has shape \(64, 64\).*expects \(32, 64\)"):
        load_weights(_fresh(tiny), state)


def test_unexpected_tensor_is_named(tiny) -> None:
    state = dict(tiny.model.state_dict())
    state["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    with pytest.raises(WeightLoadError, match=r"q_proj\.bias"):
        load_weights(_fresh(tiny), state)


def test_tied_head_that_differs_is_refused(tiny) -> None:
    state = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"] + 1
    with pytest.raises(WeightLoadError, match="lm_head"):
        load_weights(_fresh(tiny), state)


def test_checkpoint_without_lm_head_loads_tied(tiny, model) -> None:
    """The safetensors file of a tied model stores the matrix once; the head follows the embedding."""
    state = {k: v for k, v in tiny.model.state_dict().items() if k != "lm_head.weight"}
    fresh = _fresh(tiny)
    load_weights(fresh, state)
    assert fresh.lm_head.weight.data_ptr() == fresh.embed_tokens.weight.data_ptr()
    torch.testing.assert_close(fresh.lm_head.weight, model.lm_head.weight)


def test_unsupported_rope_is_refused(tiny) -> None:
    settings = {**tiny.model.config.to_dict(), "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}
    cfg = type(tiny.model.config)(**settings)
    with pytest.raises(ValueError, match="RoPE"):
        ModelConfig.from_hf(cfg)
