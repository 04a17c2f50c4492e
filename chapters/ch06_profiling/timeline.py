"""What a profiler timeline says about a decode step: how many ops or kernels it runs, how long
they take, and, on a GPU, how long the GPU sits idle between kernels waiting for the host.

On a GPU the host (Python, PyTorch's dispatcher, the CUDA driver) queues kernels and the GPU runs
them. If queueing one kernel takes longer than running it, the GPU finishes each kernel and waits
for the next: the gaps between kernels on the GPU's timeline are host overhead made visible.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

# Trace categories of work the GPU does (kernels, copies and fills).
_GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
# aten ops that are matrix products, for the CPU breakdown.
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"}


def _trace(prof: Any) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)["traceEvents"]


def _union_us(intervals: list[tuple[float, float]]) -> float:
    busy, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        busy += e - max(s, end)
        end = e
    return busy


def idle_gaps_us(intervals: list[tuple[float, float]]) -> list[float]:
    """The idle stretches between consecutive busy stretches (overlapping intervals merged)."""
    gaps, end = [], None
    for s, e in sorted(intervals):
        if end is not None and s > end:
            gaps.append(s - end)
        end = e if end is None else max(end, e)
    return gaps


def gap_summary(intervals: list[tuple[float, float]], steps: int,
                small_us: float = 10.0) -> dict[str, float]:
    """Where the idle time sits: in short gaps between back-to-back kernels (under `small_us`: the
    GPU's own cost of starting the next kernel, or a launch just behind) or in long ones (the GPU
    waiting for the host, e.g. between steps)."""
    gaps = sorted(idle_gaps_us(intervals))
    small = [g for g in gaps if g < small_us]
    return {
        "gpu_gaps_per_step": len(gaps) / steps,
        "gpu_gap_us_median": gaps[len(gaps) // 2] if gaps else 0.0,
        "gpu_idle_in_small_gaps_s_per_step": sum(small) / 1e6 / steps,
        "gpu_idle_in_large_gaps_s_per_step": (sum(gaps) - sum(small)) / 1e6 / steps,
        "small_gap_us": small_us,
    }


def _top_level(ops: list[dict[str, Any]]) -> int:
    """Ops called by Python, not by another op (aten::linear calls aten::t and aten::mm: one op)."""
    count, end = 0, float("-inf")
    for e in sorted(ops, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0)))):
        if float(e["ts"]) >= end:
            count += 1
            end = float(e["ts"]) + float(e.get("dur", 0))
    return count


def profile_steps(step: Callable[[], object], device: str, steps: int = 20,
                  warmup: int = 3) -> dict[str, Any]:
    """Profile `steps` calls of `step`, each followed by a synchronisation (an engine reads the
    chosen token back after every step, so steps never overlap), and summarise the timeline."""
    cuda = str(device).startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.inference_mode():
        for _ in range(warmup):
            step()
        sync()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                with record_function("decode_step"):
                    step()
                    sync()
            wall = (time.perf_counter() - t0) / steps
    events = _trace(prof)
    out: dict[str, Any] = {"steps": steps, "wall_per_step_s": wall}
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
    out["aten_ops_per_step"] = _top_level(cpu_ops) / steps
    # Self time per op name (the profiler's own key_averages, which subtracts children).
    self_us: dict[str, float] = defaultdict(float)
    for avg in prof.key_averages():
        self_us[avg.key] += avg.self_cpu_time_total
    top = sorted(self_us.items(), key=lambda kv: -kv[1])[:12]
    out["top_cpu_self_ms_per_step"] = {k: v / 1000 / steps for k, v in top}
    out["matmul_cpu_self_s_per_step"] = sum(v for k, v in self_us.items() if k in MATMUL_OPS) / 1e6 / steps
    if cuda:
        gpu = [e for e in events if e.get("cat") in _GPU_CATEGORIES]
        intervals = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu]
        span = max(e for _, e in intervals) - min(s for s, _ in intervals) if intervals else 0.0
        busy = _union_us(intervals)
        out.update(
            kernels_per_step=len(gpu) / steps,
            gpu_kernel_s_per_step=sum(float(e["dur"]) for e in gpu) / 1e6 / steps,
            gpu_busy_s_per_step=busy / 1e6 / steps,
            # From the first kernel to the last, the time the GPU ran nothing: waiting on the host.
            gpu_idle_s_per_step=(span - busy) / 1e6 / steps,
            gpu_idle_fraction=(span - busy) / span if span else 0.0,
            **gap_summary(intervals, steps),
        )
        by_kernel: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for e in gpu:
            by_kernel[e["name"]][0] += 1
            by_kernel[e["name"]][1] += float(e["dur"])
        out["top_kernels"] = [
            {"name": k[:80], "calls_per_step": c / steps, "us_per_step": d / steps}
            for k, (c, d) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:10]]
    return out


def format_summary(title: str, s: dict[str, Any]) -> str:
    lines = [f"{title}: {s['wall_per_step_s'] * 1e3:.3f} ms/step wall, "
             f"{s['aten_ops_per_step']:.0f} aten ops/step"]
    if "kernels_per_step" in s:
        lines.append(
            f"  {s['kernels_per_step']:.0f} GPU kernels/step, kernel time "
            f"{s['gpu_kernel_s_per_step'] * 1e6:.0f} us/step, GPU idle between kernels "
            f"{s['gpu_idle_s_per_step'] * 1e6:.0f} us/step ({s['gpu_idle_fraction']:.0%})")
    else:
        lines.append(f"  matmul ops (self CPU) {s['matmul_cpu_self_s_per_step'] * 1e3:.2f} ms/step")
    return "\n".join(lines)


def decode_steps(hf_model: torch.nn.Module, context: int, graph: bool) -> dict[str, Callable[[], object]]:
    """Batch-1 decode steps at `context` tokens of cache, ready to call repeatedly:

    * `hf_eager`: the library's forward with its dynamic cache (grows by one slot per call);
    * `ch04_eager`: chapter 4's step: chapter 3's model over chapter 4's contiguous cache;
    * `ours_eager`: chapter 3's model over the static cache, as an engine would run it;
    * `ours_graph`: the same step replayed from a CUDA graph (GPU only, `graph=True`).
    Each call also picks the greedy token on the device, as an engine step does."""
    from transformers import DynamicCache

    from chapters.ch03_model.model import from_hf
    from chapters.ch04_kv_cache.cache import KVCache
    from chapters.ch06_profiling.graph import DecodeStep, StaticKVCache, bucket
    from chapters.ch06_profiling.roofline import _cache_kwarg

    device = next(hf_model.parameters()).device
    prompt = torch.randint(0, hf_model.config.vocab_size, (1, context),
                           generator=torch.Generator().manual_seed(0)).tolist()[0]
    steps: dict[str, Callable[[], object]] = {}
    with torch.inference_mode():
        cache = DynamicCache()
        key = _cache_kwarg(hf_model)
        hf_model(torch.tensor([prompt], device=device), use_cache=True, logits_to_keep=1,
                 **{key: cache})
        nxt = torch.tensor([[prompt[-1]]], device=device)
        steps["hf_eager"] = lambda: hf_model(nxt, use_cache=True, **{key: cache}).logits.argmax(-1)
        ours = from_hf(hf_model)
        # Chapter 4's step. Its cache accepts only the next position, so each call first rewinds
        # the cache by one position: every call writes the same slot, as a real step would.
        kv = KVCache.for_model(ours, rows=1, max_len=context + 1)
        ours(torch.tensor([prompt[:-1]], device=device),
             torch.arange(context - 1, device=device)[None], kv, last_only=True)
        last = torch.tensor([[prompt[-1]]], device=device)
        position = torch.tensor([[context - 1]], device=device)

        def ch04_step() -> torch.Tensor:
            kv.lengths.fill_(context - 1)
            return ours(last, position, kv, last_only=True)[0, -1].argmax()

        steps["ch04_eager"] = ch04_step
        for name in ("ours_eager", "ours_graph") if graph else ("ours_eager",):
            step = DecodeStep(ours, StaticKVCache.for_model(ours, bucket(context + 64)))
            if name == "ours_graph":
                step.capture()  # before the prefill: capturing runs the step at position 0
            step.prefill(prompt)
            steps[name] = lambda step=step: step(prompt[-1], context).argmax()
    return steps
