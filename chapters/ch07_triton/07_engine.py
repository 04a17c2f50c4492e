"""07 — the engine: chapter 6's graph-captured decode step, rebuilt from Triton kernels.

Prints one decoder layer of the model the graph records, before and after the swap; the greedy
tokens of chapter 6 and chapter 7 on three prompts; and how many ops (CPU) or GPU kernels (GPU) one
decode step runs, profiled outside the graph. On a CPU the kernels run through Triton's
interpreter, so by default this uses the tiny random-weight model (one layer); on a GPU, or with
--real, the real model (on a CPU the engine then falls back to chapter 6's path and says so).
Writes results/cpu/ch07_engine.json (results/gpu/ or $OUT on a GPU).

    python chapters/ch07_triton/07_engine.py [--real] [--tokens 12]

The numbers that matter (kernels per step and decode speed on the H200) come from gpu_engines.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chapters.ch07_triton.interpret import INTERPRET  # sets TRITON_INTERPRET before triton loads

import argparse

import torch

from chapters.ch06_profiling.engine import CudaGraphEngine
from chapters.ch06_profiling.timeline import profile_steps
from chapters.ch07_triton.engine import TritonEngine
from shared import config
from shared.benchmark import provenance, save_results
from shared.contracts import SamplingParams
from shared.model import load_model, tiny_model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--real", action="store_true", help="the real model even on a CPU (kernels off there)")
parser.add_argument("--tokens", type=int, default=12)
args = parser.parse_args()
torch.set_num_threads(1)
started = provenance()
tiny = INTERPRET and not args.real
loaded = tiny_model(seed=0, layers=1) if tiny else load_model()
kw = {"min_cache_len": 16, "kernels": True} if tiny else {}
ch06 = CudaGraphEngine(loaded, min_cache_len=kw.get("min_cache_len", 256))
ch07 = TritonEngine(loaded, **kw)
print(f"model: {loaded.manifest['model']}\nch07 implementation: {ch07.implementation}\n")

if ch07.kernels:
    print("chapter 6's decoder layer (what its graph records):\n", ch06.model.layers[0], "\n")
    print("chapter 7's (same weight tensors, other modules; rope:", type(ch07.fast_model.rope).__name__,
          "):\n", ch07.fast_model.layers[0], "\n")

prompts = [config.PROMPT, "The capital of France is", "def fibonacci(n):"]
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
rows = []
for prompt, a, b in zip(prompts, ch06.generate_batch(prompts, params), ch07.generate_batch(prompts, params)):
    rows.append({"prompt": prompt, "same_tokens": a.output_ids == b.output_ids,
                 "ch06_ids": a.output_ids, "ch07_ids": b.output_ids})
    print(f"{'same' if rows[-1]['same_tokens'] else 'DIFFERENT'} tokens: {prompt[:40]!r} -> {b.text!r}")

profiles = {}
for name, engine in (("ch06_cuda_graph", ch06), ("ch07_triton", ch07)):
    step = max(engine._steps.items())[1]  # the step (and cache) the last request used
    p = profile_steps(step._forward, str(engine.device), steps=3)
    profiles[name] = {k: p[k] for k in ("aten_ops_per_step", "kernels_per_step", "wall_per_step_s") if k in p}
print(f"\n{'step':<18}{'aten ops':>10}{'GPU kernels':>13}")
for name, p in profiles.items():
    print(f"{name:<18}{p['aten_ops_per_step']:>10.0f}{p.get('kernels_per_step', float('nan')):>13.0f}")
if INTERPRET and ch07.kernels:
    print("(CPU: the interpreter runs each Triton kernel as many small NumPy ops, so ch07's op count "
          "here says nothing about a GPU; gpu_engines.py counts kernels on the H200)")
path = save_results("ch07_engine", {"tiny_model": tiny, "implementation": ch07.implementation,
                                    "prompts": rows, "step_profiles": profiles},
                    device=str(ch07.device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"wrote {path}")
