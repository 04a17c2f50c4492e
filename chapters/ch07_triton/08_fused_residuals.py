"""08 — the residual adds, moved into the GEMM epilogues: what 60 fewer kernels per step buy.

Each decoder layer adds its input back twice: x + o_proj(attention) and x + down(swiglu). Written
as in chapter 3, each add is its own small kernel that reads two vectors and writes one. Our GEMM
can add a residual to its output tile before storing it (`matmul(..., residual=)`), so the engine
swaps each decoder layer for `TritonDecoderLayer` (layers.py), whose o and down projections do the
adds. This script runs chapter 7's engine both ways on the same prompt: the tokens (the same
products, rounded once instead of twice per add, so bf16 may part at near-ties), the kernels per
decode step (profiled outside the graph), and decode tokens/s, alternating, --rounds times.

    python chapters/ch07_triton/08_fused_residuals.py            # GPU: real model, 256 tokens
    python chapters/ch07_triton/08_fused_residuals.py --tokens 8  # CPU: tiny model, interpreter

Writes ch07_fused_residuals.json (results/cpu/, or $OUT / results/gpu/ on a GPU) and prints a table.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chapters.ch07_triton.interpret import INTERPRET  # sets TRITON_INTERPRET before triton loads

import argparse
import statistics

import torch

from chapters.ch06_profiling.timeline import profile_steps
from chapters.ch06_profiling.token_check import first_difference
from chapters.ch07_triton.engine import TritonEngine
from shared import config
from shared.benchmark import provenance, save_results
from shared.contracts import SamplingParams
from shared.model import load_model, tiny_model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tokens", type=int, default=None, help="new tokens (default: 256 on a GPU, 8 on a CPU)")
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()
if (args.tokens is not None and args.tokens < 2) or args.rounds < 1:
    parser.error("--tokens must be >= 2 (time per output token needs two) and --rounds >= 1")
torch.set_num_threads(1)
started = provenance()
tiny = INTERPRET  # the interpreter is far too slow for the real model
loaded = tiny_model(seed=0, layers=1) if tiny else load_model()
tokens = args.tokens or (8 if tiny else 256)
kw = {"min_cache_len": 16, "kernels": True} if tiny else {}
engines = {"separate adds": TritonEngine(loaded, fuse_residuals=False, **kw),
           "adds in epilogues": TritonEngine(loaded, fuse_residuals=True, **kw)}
params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)

outputs = {name: e.generate(config.PROMPT, params).output_ids for name, e in engines.items()}  # + warm-up
a, b = outputs.values()
where = first_difference(a, b)
print(f"tokens: {'identical' if where is None else f'first difference at {where}'} ({tokens} greedy)")

kernels = {}
for name, engine in engines.items():
    step = max(engine._steps.items())[1]  # the step (and cache) the request ended in
    p = profile_steps(step.forward, str(engine.device), steps=3)
    kernels[name] = {k: p[k] for k in ("aten_ops_per_step", "kernels_per_step", "gpu_busy_s_per_step") if k in p}

speeds: dict[str, list[float]] = {name: [] for name in engines}
for r in range(args.rounds):
    order = list(engines.items())[r % 2:] + list(engines.items())[:r % 2]  # alternate who goes first
    for name, engine in order:
        speeds[name].append(1000 / engine.generate(config.PROMPT, params).metrics.tpot_ms)
ratios = [f / s for s, f in zip(speeds["separate adds"], speeds["adds in epilogues"])]

path = save_results("ch07_fused_residuals", {
    "tiny_model": tiny, "tokens": tokens, "rounds": args.rounds,
    "implementations": {name: e.implementation for name, e in engines.items()},
    "output_ids": outputs, "first_difference": where, "step_profiles": kernels,
    "decode_tok_s": speeds, "fused_over_separate_per_round": ratios,
}, device=str(next(iter(engines.values())).device), started=started,
    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"wrote {path}\n")
print(f"{'residual adds':<20}{'aten ops/step':>14}{'kernels/step':>14}{'decode tok/s (median)':>24}")
for name in engines:
    k = kernels[name]
    print(f"{name:<20}{k['aten_ops_per_step']:>14.0f}{k.get('kernels_per_step', float('nan')):>14.0f}"
          f"{statistics.median(speeds[name]):>24.1f}")
print(f"adds in epilogues / separate adds, per round: median {statistics.median(ratios):.2f} "
      f"({min(ratios):.2f}-{max(ratios):.2f}, {args.rounds} rounds)")
if tiny:
    print("(CPU: the interpreter, one layer; the speed here says nothing about a GPU)")
