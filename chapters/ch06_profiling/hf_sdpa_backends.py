"""Why chapter 1 is so slow on the H200: Hugging Face `generate()` (eager, dynamic cache) decodes
at about 80 ms per token there, and the profiler puts about half of each step's host time in one
op, `aten::_cudnn_attention_forward` (chapter 6, page 01). PyTorch's scaled_dot_product_attention may pick cuDNN's attention
on Hopper, and cuDNN builds an execution plan for each new shape; in a decode with a growing cache
every step is a new key length, so (the hypothesis) every step pays for a new plan.

This script tests that hypothesis on one prompt: chapter 1's engine decodes the same greedy tokens
with each set of SDPA backends allowed, and reports time per output token and the step's slowest
op. If turning cuDNN off removes most of the step time, the hypothesis holds.

    python chapters/ch06_profiling/hf_sdpa_backends.py [--tokens 64]   # GPU; writes ch01_sdpa_backends.json
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch06_profiling.report import write_json
from shared import config
from shared.benchmark.offline import measure_request
from shared.contracts import SamplingParams
from shared.model import load_model

# (label, the SDPA backends left on). "default" leaves PyTorch's choice alone.
SETTINGS: list[tuple[str, dict[str, bool]]] = [
    ("default", {}),
    ("cudnn off", {"cudnn": False}),
    ("math only", {"cudnn": False, "flash": False, "mem_efficient": False}),
]
_SWITCHES = {"cudnn": torch.backends.cuda.enable_cudnn_sdp,
             "flash": torch.backends.cuda.enable_flash_sdp,
             "mem_efficient": torch.backends.cuda.enable_mem_efficient_sdp}
_STATE = {"cudnn": torch.backends.cuda.cudnn_sdp_enabled,
          "flash": torch.backends.cuda.flash_sdp_enabled,
          "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled}


def set_backends(switches: dict[str, bool]) -> None:
    """Global switches: generate() runs in chapter 1's worker thread, so a context manager on this
    thread would not reach it."""
    for name, on in {**{k: True for k in _SWITCHES}, **switches}.items():
        _SWITCHES[name](on)


def slowest_ops(engine: BaselineEngine, top: int = 3) -> list[dict[str, Any]]:
    """The ops with the most self device time over one short generate() (8 tokens), with chapter
    1's arguments. Called on this thread, not through the engine's worker thread: the profiler
    attributes ops only on the thread that started it."""
    short = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    ids = torch.tensor([engine.encode(config.PROMPT)], device=engine.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ids.is_cuda else [])
    with torch.inference_mode(), profile(activities=activities) as prof:
        engine.loaded.model.generate(ids, attention_mask=torch.ones_like(ids),
                                     **engine.generation_kwargs(short))
    rows = sorted(prof.key_averages(), key=lambda e: e.self_device_time_total, reverse=True)[:top]
    return [{"op": e.key, "calls": e.count, "self_device_ms": e.self_device_time_total / 1e3,
             "self_cpu_ms": e.self_cpu_time_total / 1e3} for e in rows]


def measure(engine: BaselineEngine, tokens: int) -> list[dict[str, Any]]:
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    rows = []
    for label, switches in SETTINGS:
        set_backends(switches)
        engine.generate(config.PROMPT, SamplingParams(max_tokens=8, temperature=0.0))  # warm-up
        record = measure_request(engine, engine.encode(config.PROMPT), params)
        rows.append({"setting": label, "enabled": {k: f() for k, f in _STATE.items()},
                     "tpot_ms": record.tpot_ms, "ttft_ms": record.ttft_ms,
                     "output_ids": record.output_ids, "slowest_ops": slowest_ops(engine)})
    set_backends({})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args(argv)
    if args.tokens < 2:
        parser.error(f"--tokens must be >= 2 (time per output token needs two), got {args.tokens}")
    if not torch.cuda.is_available():
        sys.exit("hf_sdpa_backends.py measures a GPU's attention backends; no CUDA device here")
    engine = BaselineEngine(load_model(device="cuda", dtype=torch.bfloat16))
    rows = measure(engine, args.tokens)
    reference = rows[0]["output_ids"]
    for row in rows:
        row["same_tokens_as_default"] = row["output_ids"] == reference
    path = write_json("ch01_sdpa_backends.json", {"tokens": args.tokens, "prompt": config.PROMPT,
                                                   "settings": rows}, "cuda")
    print(f"wrote {path}\n")
    print(f"{'SDPA backends':<12}{'TPOT (ms)':>10}{'TTFT (ms)':>10}  same tokens  slowest op (self device ms / 8 tokens)")
    for r in rows:
        op = r["slowest_ops"][0]
        print(f"{r['setting']:<12}{r['tpot_ms']:>10.1f}{r['ttft_ms']:>10.1f}  "
              f"{'yes' if r['same_tokens_as_default'] else 'NO':<11}  {op['op']} {op['self_device_ms']:.1f}")


if __name__ == "__main__":
    main()
