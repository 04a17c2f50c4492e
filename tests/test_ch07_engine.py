"""Chapter 7's engine against chapter 6's, on the CPU through Triton's interpreter.

The tiny random-weight model (one layer, so the interpreter takes well under a second per step),
float32: the Triton decode step gives chapter 6's greedy tokens on several prompts, across a
cache bucket boundary, and its logits stay within 1e-5 (relative) of chapter 6's step. The two new
kernels (RoPE + cache write, decode attention) are checked against chapter 3's PyTorch on their
own, in float32 and bfloat16. The GPU run (gpu_engines.py) compares the real model in bf16.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import KERNEL_DEVICE  # before triton: sets the interpreter

import pytest
import torch

from chapters.ch03_model.model import RotaryEmbedding, attend, causal_visibility
from chapters.ch06_profiling.engine import CudaGraphEngine
from chapters.ch06_profiling.graph import DecodeStep, StaticKVCache
from chapters.ch07_triton.check import rel_err
from chapters.ch07_triton.decode_attention import decode_attention
from chapters.ch07_triton.engine import RopeCacheAttention, TritonEngine
from chapters.ch07_triton.rope_cache import rope_cache_write
from shared.contracts import SamplingParams
from shared.model import tiny_model

# Prompts of 6-9 tokens + 12 new tokens cross the 16-slot bucket: the cache moves mid-request.
PROMPTS = ["According to all known laws of aviation", "The capital of France is"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
LOGIT_REL_TOL = 1e-5  # float32: same products, different order of additions


@pytest.fixture(scope="module")
def engines() -> tuple[CudaGraphEngine, TritonEngine]:
    tiny = tiny_model(seed=0, layers=1)
    return CudaGraphEngine(tiny, min_cache_len=16), TritonEngine(tiny, min_cache_len=16, kernels=True)


def test_greedy_tokens_identical_to_chapter_6(engines) -> None:
    ch06, ch07 = engines
    theirs, mine = ch06.generate_batch(PROMPTS, GREEDY), ch07.generate_batch(PROMPTS, GREEDY)
    for a, b in zip(theirs, mine):
        assert b.output_ids == a.output_ids
    assert 32 in ch07._steps  # the bucket was crossed


def test_decode_step_logits_match_chapter_6(engines) -> None:
    ch06, ch07 = engines
    prompt = ch07.encode(PROMPTS[0])
    theirs = DecodeStep(ch06.model, StaticKVCache.for_model(ch06.model, 32))
    mine = ch07.new_step(32)
    with torch.inference_mode():
        a, b = theirs.prefill(prompt), mine.prefill(prompt)
        assert torch.equal(a, b)  # the prefill is chapter 6's, unchanged
        for i, token in enumerate([17, 400, 9000]):
            a, b = theirs(token, len(prompt) + i), mine(token, len(prompt) + i)
            assert rel_err(b, a) < LOGIT_REL_TOL
            assert int(b.argmax()) == int(a.argmax())


def test_cpu_default_is_chapter_6_and_says_so() -> None:
    engine = TritonEngine(tiny_model(seed=0, layers=1), min_cache_len=16)
    assert not engine.kernels
    prov = engine.generate(PROMPTS[1], SamplingParams(temperature=0.0, max_tokens=2)).provenance
    assert prov["engine"] == "TritonEngine"
    assert "Triton kernels off" in prov["implementation"]


def test_provenance_names_the_kernels_and_the_interpreter(engines) -> None:
    impl = engines[1].implementation
    assert "RoPE+cache write" in impl and "interpreter" in impl


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,d,t,start", [(9, 3, 64, 1, 100), (4, 2, 16, 3, 5), (4, 4, 32, 2, 0)])
def test_rope_cache_write_and_decode_attention_match_pytorch(dtype, hq, hkv, d, t, start) -> None:
    gen = torch.Generator().manual_seed(hq * 100 + t)
    slots = 130
    rope = RotaryEmbedding(d, 100_000.0, 512)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype).to(KERNEL_DEVICE)

    # q, k, v as the model makes them: transposed views of [B, T, H, D].
    q, k, v = r(1, t, hq, d).transpose(1, 2), r(1, t, hkv, d).transpose(1, 2), r(1, t, hkv, d).transpose(1, 2)
    positions = torch.arange(start, start + t)[None]
    keys, values = r(hkv, slots, d), r(hkv, slots, d)
    ref_keys, ref_values = keys.double(), values.double()
    q_rot = rope_cache_write(q[0], k[0], v[0], positions[0], rope.cos, rope.sin, keys, values)
    out = decode_attention(q_rot, keys, values, positions[0])

    q_ref, k_ref = rope(q.double(), k.double(), positions)  # float64 reference
    ref_keys[:, start:start + t], ref_values[:, start:start + t] = k_ref[0], v[0].double()
    visible = causal_visibility(positions, torch.arange(slots)[None])
    ref = attend(q_ref, ref_keys[None], ref_values[None], visible)[0].transpose(0, 1)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(q_rot, q_ref[0].transpose(0, 1)) < tol
    assert rel_err(keys, ref_keys) < tol and torch.equal(values.double(), ref_values)
    assert rel_err(out, ref) < tol


def test_bad_input_is_refused() -> None:
    q, k = torch.zeros(4, 1, 16), torch.zeros(2, 1, 16)
    cache = torch.zeros(2, 8, 16)
    cos = torch.zeros(32, 16)
    with pytest.raises(ValueError, match="positions must be int64"):
        rope_cache_write(q, k, k, torch.tensor([1.0]), cos, cos, cache, cache.clone())
    with pytest.raises(ValueError, match="3 query heads"):
        decode_attention(torch.zeros(1, 3, 16), cache, cache.clone(), torch.tensor([0]))
    backend = RopeCacheAttention(StaticKVCache(1, 2, 16, 8, "cpu", torch.float32), cos, cos)
    with pytest.raises(ValueError, match="batch of 2"):
        backend.forward(0, torch.zeros(2, 4, 1, 16), torch.zeros(2, 2, 1, 16), torch.zeros(2, 2, 1, 16),
                        torch.zeros(2, 1, dtype=torch.long))


def test_separate_residual_adds_give_the_same_tokens(engines) -> None:
    # The engine's default moves the residual adds into GEMM epilogues; chapter 3's layer with its
    # separate adds must give the same greedy tokens (float32, interpreter).
    ch06, fused = engines
    separate = TritonEngine(ch06.loaded, min_cache_len=16, kernels=True, fuse_residuals=False)
    assert fused.fuse_residuals and "residual adds in GEMM epilogues" in fused.implementation
    assert "separate residual adds" in separate.implementation
    for prompt in PROMPTS:
        assert separate.generate(prompt, GREEDY).output_ids == fused.generate(prompt, GREEDY).output_ids


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--tokens", "1"]])
def test_fused_residuals_script_refuses_bad_arguments(argv: list[str]) -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "chapters" / "ch07_triton" / "08_fused_residuals.py"
    proc = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--rounds >= 1" in proc.stderr
