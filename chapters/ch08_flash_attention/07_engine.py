"""07 — the engine: chapter 7's, with the prefill's attention done by the flash kernel.

Checks, on the tiny random-weight model through Triton's interpreter (the real model on a GPU):
the flash prefill gives chapter 7's logits and writes the same keys and values into the cache, at
several prompt lengths; the greedy tokens are chapter 7's on three prompts. Then, by formula for
the real model, what chapter 7's prefill attention materialises per layer (its softmax weights,
float32, for every query head, prompt position and slot of the cache bucket; the scores before them
are as large again in the model's dtype) and what the flash kernel keeps instead (only its tiles).
Writes results/cpu/ch08_engine.json (results/gpu/ or $OUT on a GPU).

    python chapters/ch08_flash_attention/07_engine.py

Measured prefill times and peak memory on the H200: chapters/ch07_triton/gpu_engines.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chapters.ch07_triton.interpret import INTERPRET  # sets TRITON_INTERPRET before triton loads

import torch

from chapters.ch06_profiling.graph import bucket
from chapters.ch07_triton.check import rel_err
from chapters.ch07_triton.engine import TritonEngine
from chapters.ch08_flash_attention.engine import FlashAttentionEngine
from shared import config
from shared.benchmark import provenance, save_results
from shared.contracts import SamplingParams
from shared.model import load_model, tiny_model

torch.set_num_threads(1)
started = provenance()
loaded = tiny_model(seed=1, layers=1) if INTERPRET else load_model()
kw = {"min_cache_len": 16, "kernels": True} if INTERPRET else {}
ch07, ch08 = TritonEngine(loaded, **kw), FlashAttentionEngine(loaded, **kw)
print(f"model: {loaded.manifest['model']}\nch08 implementation: {ch08.implementation}\n")

prefill = []
print(f"{'prompt tokens':>13}{'rel. logit diff':>17}{'same token':>12}{'same cache':>12}")
for n in (7, 40, 100):
    ids = torch.randint(3, loaded.model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(n)).tolist()
    size = bucket(n + 1, ch07.min_cache_len)
    a_step, b_step = ch07.new_step(size, capture=False), ch08.new_step(size, capture=False)
    with torch.inference_mode():
        a, b = a_step.prefill(ids), b_step.prefill(ids)
    same_cache = torch.equal(a_step.cache.keys[..., :n, :], b_step.cache.keys[..., :n, :])
    prefill.append({"prompt_tokens": n, "rel_logit_diff": rel_err(b, a),
                    "same_token": int(a.argmax()) == int(b.argmax()), "same_cache": same_cache})
    r = prefill[-1]
    print(f"{n:>13}{r['rel_logit_diff']:>17.2e}{str(r['same_token']):>12}{str(same_cache):>12}")

prompts = [config.PROMPT, "The capital of France is", "def fibonacci(n):"]
params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
tokens = [{"prompt": p, "same_tokens": a.output_ids == b.output_ids}
          for p, a, b in zip(prompts, ch07.generate_batch(prompts, params), ch08.generate_batch(prompts, params))]
print("\ngreedy tokens identical to chapter 7:", [t["same_tokens"] for t in tokens])

# The real model's shapes (config), by formula: chapter 7's prefill attention (chapter 3's `attend`
# over chapter 6's whole bucket) builds float32 softmax weights for every query head, prompt
# position and cache slot, per layer; its scores are another tensor of that shape.
heads, context = 9, 8192
formula = []
print(f"\n{'prompt':>7}{'bucket':>8}{'ch07 softmax MiB/layer (formula)':>34}")
for n in (512, 2048, 8191):
    slots = bucket(n + 1, 256)
    mib = heads * n * slots * 4 / 2**20
    formula.append({"prompt_tokens": n, "cache_slots": slots, "ch07_softmax_fp32_mib_per_layer": mib})
    print(f"{n:>7}{slots:>8}{mib:>34.0f}")
path = save_results("ch08_engine", {"interpreter_tiny_model": INTERPRET, "implementation": ch08.implementation,
                                    "prefill": prefill, "tokens": tokens, "score_formula": formula},
                    device=str(ch08.device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"wrote {path}")
