"""Chapter 3's engine on a tiny random Llama: chapter 2's loop over the hand-written model gives
chapter 2's tokens (greedy and seeded sampling), and its provenance says which code ran."""

from __future__ import annotations

import pytest

from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from chapters.ch03_model.engine import ModelEngine
from shared.contracts import SamplingParams
from shared.model import tiny_model

PROMPTS = ["According to all known laws of aviation", "The capital of France is", "1, 2, 3,"]
SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, max_tokens=8, ignore_eos=True, seed=7)
GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def engines():
    tiny = tiny_model(seed=0)
    return GenerateLoopEngine(tiny), ModelEngine(tiny)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_same_tokens_as_chapter_2(engines, params: SamplingParams) -> None:
    ch02, ch03 = engines
    ours = ch03.generate_batch(PROMPTS, params)
    theirs = ch02.generate_batch(PROMPTS, params)
    for a, b in zip(ours, theirs):
        assert a.output_ids == b.output_ids
        assert a.text == b.text
        assert a.metrics.positions_processed == b.metrics.positions_processed


def test_provenance_names_the_implementation(engines) -> None:
    """Identical outputs, distinct records: the model manifest is shared, the code is not."""
    ch02, ch03 = engines
    a, b = ch02.generate(PROMPTS[0], GREEDY), ch03.generate(PROMPTS[0], GREEDY)
    assert a.output_ids == b.output_ids
    assert b.provenance["implementation"] == "ch03 hand-written Llama (PyTorch)"
    assert a.provenance["implementation"] != b.provenance["implementation"]
    assert a.provenance["engine"] != b.provenance["engine"]
    assert a.provenance["manifest_sha256"] == b.provenance["manifest_sha256"]


def test_timing_parts_sum_to_total(engines) -> None:
    m = engines[1].generate(PROMPTS[1], GREEDY).metrics
    assert m.forward_ms > 0 and m.ttft_ms > 0 and m.tpot_ms > 0
    assert abs(m.forward_ms + m.selection_ms + m.other_ms - m.total_ms) < 1e-6
