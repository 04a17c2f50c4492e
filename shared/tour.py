"""The main job (`make run`): every finished chapter's engine on the same workload.

Each engine runs the same greedy requests, in rotating order (see `compare_engines`), after a
discarded warm-up. The tour prints one table (tok/s, TTFT, TPOT, speed-up over chapter 1 with the
spread of the per-round ratios, peak memory, and whether the tokens equal chapter 1's), writes
results/<cpu|gpu>/tour.json with a plot next to it, and exits with status 1 if any engine's tokens
differ from chapter 1's: a faster engine that says something else is a bug, not a speed-up.

That verdict needs float32 (the CPU's dtype). In bfloat16 (the GPU's) two candidates whose logits
are one rounding step apart can swap when the same sum is taken in another order, so different
engines part at near-ties without any bug: there the tour reports which engines' tokens differ but
gives no verdict (the chapters' GPU scripts keep the logits and measure the gap where tokens part).

    python -m shared.tour                       # 2 runs x 64 tokens: a couple of minutes on a CPU
    python -m shared.tour --runs 5 --tokens 256 --chapters ch01_baseline ch04_kv_cache

A chapter joins the tour by adding one line to TOUR: its folder name and its engine class, which
must accept a loaded model as its first argument (the tour loads the weights once for all).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import torch

from shared.benchmark.cli import offline_main, offline_parser, parse
from shared.engine import BaseOfflineEngine
from shared.model import load_model

# (chapter, "module:EngineClass"), in chapter order; the first is the reference.
TOUR: list[tuple[str, str]] = [
    ("ch01_baseline", "chapters.ch01_baseline.engine:BaselineEngine"),
    ("ch02_generate_loop", "chapters.ch02_generate_loop.engine:GenerateLoopEngine"),
    ("ch03_model", "chapters.ch03_model.engine:ModelEngine"),
    ("ch04_kv_cache", "chapters.ch04_kv_cache.engine:KVCacheEngine"),
    # Chapter 5 batches requests; one request alone runs chapter 4's code, so it adds no row here.
    ("ch06_profiling", "chapters.ch06_profiling.engine:CudaGraphEngine"),
    ("ch07_triton", "chapters.ch07_triton.engine:TritonEngine"),
    ("ch08_flash_attention", "chapters.ch08_flash_attention.engine:FlashAttentionEngine"),
]


def engine_class(spec: str) -> type[BaseOfflineEngine]:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def select(chapters: Sequence[str] | None) -> list[tuple[str, str]]:
    """The tour's entries for `chapters` (all when None); the reference always comes first."""
    if not chapters:
        return list(TOUR)
    known = [c for c, _ in TOUR]
    unknown = [c for c in chapters if c not in known]
    if unknown:
        raise ValueError(f"unknown chapter(s) {unknown}; the tour has {known}")
    return [TOUR[0]] + [entry for entry in TOUR[1:] if entry[0] in chapters]


def verdict(reference: str, differ: Sequence[str], n_engines: int, dtype: torch.dtype) -> tuple[str, int]:
    """The tour's last line and exit status: token identity is a verdict in float32 only."""
    if not differ:
        return f"All {n_engines} engine(s) produced {reference}'s tokens.", 0
    listed = ", ".join(differ)
    if dtype == torch.float32:
        return f"FAIL: tokens differ from {reference}: {listed}", 1
    return (f"In {str(dtype).removeprefix('torch.')}, tokens differ from {reference}: {listed}. Not a "
            "verdict: rounding can swap near-tied tokens; identity is checked in float32.", 0)


def main(argv: Sequence[str] | None = None) -> int:
    p = offline_parser(__doc__)
    p.prog = "python -m shared.tour"
    p.set_defaults(runs=2)
    p.add_argument("--chapters", nargs="+", help="chapters to include (chapter 1 always is)")
    args = parse(p, argv)
    try:
        entries = select(args.chapters)
    except ValueError as exc:
        p.error(str(exc))
    loaded = load_model(args.model)
    engines = [engine_class(spec)(loaded) for _, spec in entries]
    body = offline_main(args, engines, name="tour", labels=[c for c, _ in entries], compare=True)
    differ = [c["label"] for c in body["comparison"] if not c["same_tokens_as_reference"]]
    message, status = verdict(entries[0][0], differ, len(engines), loaded.model.dtype)
    print(f"\n{message}", file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
