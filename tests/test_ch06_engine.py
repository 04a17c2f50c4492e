"""Chapter 6's engine on a CPU, where the static step runs eagerly: the arithmetic a CUDA graph
would record gives chapter 4's tokens, greedy and seeded, on several prompts, across cache buckets,
on the tiny model and the real one. (The graph itself is checked on the GPU by gpu_benchmark.py.)"""

from __future__ import annotations

import pytest

from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch06_profiling.engine import CudaGraphEngine
from shared.contracts import SamplingParams
from shared.model import load_model, tiny_model

PROMPTS = ["According to all known laws of aviation", "The capital of France is", "1, 2, 3,",
           "def fibonacci(n):"]
# 40 new tokens after prompts of 4-8 tokens cross the 16- and 32-slot buckets: the cache moves.
GREEDY = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
SAMPLED = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, max_tokens=24, ignore_eos=True, seed=7)


@pytest.fixture(scope="module")
def tiny_engines():
    tiny = tiny_model(seed=0)
    return KVCacheEngine(tiny), CudaGraphEngine(tiny, min_cache_len=16)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_same_tokens_as_chapter_4(tiny_engines, params):
    ch04, ours = tiny_engines
    theirs = ch04.generate_batch(PROMPTS, params)
    mine = ours.generate_batch(PROMPTS, params)
    for a, b in zip(theirs, mine):
        assert b.output_ids == a.output_ids
        assert b.text == a.text
    assert sorted(ours._steps) == [16, 32, 64]  # buckets were created and crossed


def test_decode_processes_one_position_per_step(tiny_engines):
    ours = tiny_engines[1]
    prompt = ours.encode(PROMPTS[0])
    m = ours.generate(prompt, GREEDY).metrics
    assert m.positions_processed == len(prompt) + GREEDY.max_tokens - 1
    # The metrics report the cache the request ended in: 64 slots x 2 layers x K and V x 2 heads
    # x 16 dims x 4 bytes.
    assert m.kv_cache_bytes == 64 * 2 * 2 * 2 * 16 * 4


def test_interleaved_requests_are_refused(tiny_engines):
    ours = tiny_engines[1]
    first = ours.stream(ours.encode(PROMPTS[0]), GREEDY)
    next(first)  # the first request holds the 16-slot cache now
    second = ours.stream(ours.encode(PROMPTS[2]), GREEDY)
    next(second)  # the second takes it over...
    with pytest.raises(RuntimeError, match="one request at a time"):
        next(first)  # ...and the first finds out instead of reading the second's keys
    second.close()


def test_provenance_says_the_step_runs_eagerly_on_cpu(tiny_engines):
    ours = tiny_engines[1]
    prov = ours.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=2)).provenance
    assert prov["engine"] == "CudaGraphEngine"
    assert "run eagerly" in prov["implementation"]


def test_real_model_same_greedy_tokens_as_chapter_4():
    loaded = load_model(device="cpu")
    ch04, ours = KVCacheEngine(loaded), CudaGraphEngine(loaded)
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for prompt in PROMPTS[:3]:
        assert ours.generate(prompt, params).output_ids == ch04.generate(prompt, params).output_ids


@pytest.mark.parametrize("min_cache_len", [0, 24, 1 << 20])
def test_bad_min_cache_len_is_refused(tiny_engines, min_cache_len: int) -> None:
    with pytest.raises(ValueError, match="min_cache_len"):
        CudaGraphEngine(tiny_engines[0].loaded, min_cache_len=min_cache_len)


@pytest.mark.parametrize("mode", ["reduce-overhead", "fast", ""])
def test_bad_compile_mode_is_refused(tiny_engines, mode: str) -> None:
    with pytest.raises(ValueError, match="compile_mode"):
        CudaGraphEngine(tiny_engines[0].loaded, min_cache_len=16, compile_mode=mode)


def test_compiled_step_is_what_runs(tiny_engines, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in for torch.compile that records its arguments and every call of what it returns:
    # with compile_mode set, every decode step (and, on a GPU, the warm-up and the capture) must go
    # through the compiled function, not the eager one beside it.
    from chapters.ch06_profiling import graph

    compiled: list[dict] = []
    calls = [0]

    def fake_compile(fn, **options):
        compiled.append(options)

        def run():
            calls[0] += 1
            return fn()
        return run

    monkeypatch.setattr(graph.torch, "compile", fake_compile)
    ch04 = tiny_engines[0]
    engine = CudaGraphEngine(ch04.loaded, min_cache_len=64, compile_mode="max-autotune-no-cudagraphs")
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    out = engine.generate(PROMPTS[0], params)
    assert compiled == [{"mode": "max-autotune-no-cudagraphs", "dynamic": False}]
    assert calls[0] == 11  # one per decode step: the prefill runs eagerly, then 11 steps
    assert out.output_ids == ch04.generate(PROMPTS[0], params).output_ids
    assert "max-autotune-no-cudagraphs" in engine.implementation
