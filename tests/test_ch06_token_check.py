"""The token check gpu_benchmark.py runs on the GPU (token_check.py), on the CPU: where two greedy
runs part and how close the choice was there; and the timeline's split of GPU idle time into short
and long gaps. The logits here are made by hand, so every expected number is exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch06_profiling import token_check
from chapters.ch06_profiling.engine import CudaGraphEngine
from chapters.ch06_profiling.gpu_benchmark import final_table
from chapters.ch06_profiling.timeline import gap_summary, idle_gaps_us
from shared.contracts import SamplingParams
from shared.model import tiny_model

REPO = Path(__file__).resolve().parents[1]


def logits(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_first_difference():
    assert token_check.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert token_check.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert token_check.first_difference([1, 2], [1, 2, 3]) == 2  # a prefix: parts at its end


def test_compare_records_the_gaps_where_the_tokens_part():
    # Step 0: both pick token 0. Step 1: the reference's logits nearly tie (3.0 vs 2.9) and the
    # other engine's rounding tips the choice to token 2.
    ref = ([0, 1], logits([[5.0, 1.0, 0.0], [0.0, 3.0, 2.9]]))
    other = ([0, 2], logits([[5.0, 1.0, 0.0], [0.0, 2.95, 3.0]]))
    out = token_check.compare(ref, other)
    assert out["identical"] is False and out["first_difference_at"] == 1
    assert (out["ref_token"], out["other_token"]) == (1, 2)
    assert out["ref_top2_gap"] == pytest.approx(0.1)
    assert out["ref_logit_gap"] == pytest.approx(0.1)
    assert out["other_logit_gap"] == pytest.approx(0.05)
    # The differing step still conditioned on the same tokens: its logits count.
    assert out["max_abs_logit_diff_same_prefix"] == pytest.approx(0.1)
    assert out["max_abs_logit"] == pytest.approx(5.0)


def test_compare_identical():
    run = ([0, 1], logits([[5.0, 1.0], [0.0, 3.0]]))
    out = token_check.compare(run, run)
    assert out["identical"] and out["first_difference_at"] is None
    assert out["max_abs_logit_diff_same_prefix"] == 0.0 and "ref_top2_gap" not in out


@pytest.fixture(scope="module")
def tiny():
    return tiny_model(seed=0)


def test_check_on_engines_keeps_every_steps_logits_and_restores_select(tiny):
    ch04, graphed = KVCacheEngine(tiny), CudaGraphEngine(tiny, min_cache_len=16)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    ids, rows = token_check.record_logits(ch04, "The capital of France is", params)
    assert rows.shape == (6, tiny.model.config.vocab_size)
    assert ids == [int(r.argmax()) for r in rows]  # greedy: each token is its step's argmax
    assert "select" not in vars(ch04)  # the engine's own select is back
    result = token_check.check(ch04, graphed, ["The capital of France is", "def f(x):"], params)
    assert result["identical"] and result["prompts"] == 2 and result["max_tokens"] == 6
    assert all(r["max_abs_logit_diff_same_prefix"] < 1e-4 for r in result["per_prompt"])
    assert token_check.summary(result) == "identical on 2 prompts x 6 tokens"


def test_check_refuses_sampling(tiny):
    engine = KVCacheEngine(tiny)
    sampled = SamplingParams(temperature=0.7, max_tokens=4, seed=1)
    with pytest.raises(ValueError, match="temperature"):
        token_check.check(engine, engine, ["x"], sampled)


def test_summary_names_where_and_how_close():
    result = {"identical": False, "prompts": 2, "max_tokens": 64, "per_prompt": [
        {"prompt": "a", "identical": True},
        {"prompt": "def fibonacci(n):", "identical": False, "first_difference_at": 46,
         "ref_top2_gap": 0.0625}]}
    assert token_check.summary(result) == (
        "differ on 1 of 2 prompts: 'def fibonacci(n):' at 46 (reference top-2 gap 0.0625)")


def test_gap_summary_splits_short_and_long_gaps():
    # Two steps of two kernels; 1 us between kernels within a step, 28 us between the steps;
    # overlapping kernels merge.
    intervals = [(0, 5), (6, 10), (8, 12), (40, 45), (46, 50)]
    assert idle_gaps_us(intervals) == [1, 28, 1]
    s = gap_summary(intervals, steps=2)
    assert s["gpu_gap_us_median"] == 1
    assert s["gpu_idle_in_small_gaps_s_per_step"] == pytest.approx(1e-6)
    assert s["gpu_idle_in_large_gaps_s_per_step"] == pytest.approx(14e-6)


def test_final_table_reads_the_committed_gpu_results():
    doc = json.loads((REPO / "results" / "gpu" / "ch06_gpu.json").read_text())
    table = final_table(doc)
    assert "graph / HF static+compile" in table and "bandwidth floor" in table
