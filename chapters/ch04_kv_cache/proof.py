"""The differential check of chapter 4: the cached engine, step by step, against chapter 3's model
run once without a cache over the same tokens.

Chapter 3's side is teacher-forced: one uncached pass over prompt + continuation gives, position by
position, the logits its own loop would compute at each step (the model is causal). Used by
02_proof.py and the tests."""

from __future__ import annotations

import torch

from chapters.ch03_model.model import NoCacheAttention
from chapters.ch04_kv_cache.engine import KVCacheEngine
from shared.contracts import RequestMetrics, SamplingParams


@torch.inference_mode()
def cached_greedy(engine: KVCacheEngine, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """Chapter 4's engine, step by step: the n greedy tokens and each step's logits [n, V]."""
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    seq = engine.new_sequence(prompt, params, RequestMetrics())
    out, steps = [], []
    for _ in range(n):
        logits, _ = engine.next_logits(seq)
        steps.append(logits.float())
        out.append(int(logits.argmax()))
        seq.token_ids.append(out[-1])
    return out, torch.stack(steps)


@torch.inference_mode()
def reference_logits(engine: KVCacheEngine, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    """The same model with no cache over prompt + continuation, once: each generation step's
    logits [len(continuation), V]."""
    ids = torch.tensor([prompt + continuation[:-1]], device=engine.device)
    positions = torch.arange(ids.shape[1], device=engine.device)[None]
    logits = engine.model(ids, positions, NoCacheAttention())[0]
    return logits[len(prompt) - 1 :].float()
