"""The graph-captured decode step, alone: one static step run eagerly against the same step replayed
from a CUDA graph (GPU), or against the same step through torch.compile (CPU, where there are no
graphs to capture: does compiling help there?). Same model, same cache contents, same token; the
logits are compared and the per-step time measured as an engine sees it (each step waits for its
result). Writes results/cpu/ch06_cuda_graph.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/04_cuda_graph.py [--context 256] [--no-compile]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from chapters.ch03_model.model import from_hf
from chapters.ch06_profiling.ceilings import pin_threads
from chapters.ch06_profiling.graph import DecodeStep, StaticKVCache, bucket
from chapters.ch06_profiling.report import write_json
from shared.config import DEVICE
from shared.model import load_model


def per_step_seconds(step: Callable[[], torch.Tensor], steps: int) -> list[float]:
    """Host wall time per step including reading the greedy token back, as an engine does."""
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        int(step().argmax())  # .item() waits for the device: the step is really done
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (see 00_ceilings.py)")
    parser.add_argument("--no-compile", action="store_true", help="CPU: skip torch.compile")
    args = parser.parse_args()
    pin_threads(args.device, args.threads)
    cuda = args.device.startswith("cuda")
    steps = args.steps or (200 if cuda else 10)
    loaded = load_model(device=args.device)
    model = from_hf(loaded.model)
    prompt = torch.randint(0, model.config.vocab_size, (args.context,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    size = bucket(args.context + 1)
    result: dict[str, Any] = {"device": args.device, "context": args.context, "cache_len": size,
                              "steps": steps, "variants": {}}
    with torch.inference_mode():
        eager = DecodeStep(model, StaticKVCache.for_model(model, size))
        eager.prefill(prompt)
        variants: dict[str, Callable[[], torch.Tensor]] = {
            "eager": lambda: eager(prompt[-1], args.context)}
        if cuda:
            graphed = DecodeStep(model, StaticKVCache.for_model(model, size))
            t0 = time.perf_counter()
            graphed.capture()
            result["capture_s"] = time.perf_counter() - t0
            graphed.prefill(prompt)
            variants["cuda_graph"] = lambda: graphed(prompt[-1], args.context)
        elif not args.no_compile:
            compiled_forward = torch.compile(eager._forward)
            t0 = time.perf_counter()
            try:
                eager(prompt[-1], args.context)  # fills the step's input buffers
                compiled_forward()
                result["compile_s"] = time.perf_counter() - t0
                variants["torch_compile"] = lambda: compiled_forward()[0]
            except Exception as exc:  # record it: a failed compile is a result too
                result["compile_error"] = f"{type(exc).__name__}: {exc}"[:1000]
        reference = eager(prompt[-1], args.context).clone()
        for name, fn in variants.items():
            fn()  # warm-up
            diff = (fn().float() - reference.float()).abs().max().item()
            times = per_step_seconds(fn, steps)
            result["variants"][name] = {
                "median_step_s": statistics.median(times), "min_step_s": min(times),
                "max_abs_logit_diff_vs_eager": diff, "same_greedy_token": int(fn().argmax()) == int(reference.argmax()),
            }
    eager_s = result["variants"]["eager"]["median_step_s"]
    print(f"wrote {write_json('ch06_cuda_graph.json', result, args.device)}")
    print(f"{'step':<16}{'ms/step':>10}{'speed-up':>10}{'max |dlogit|':>14}")
    for name, v in result["variants"].items():
        print(f"{name:<16}{v['median_step_s'] * 1e3:>10.3f}{eager_s / v['median_step_s']:>10.2f}"
              f"{v['max_abs_logit_diff_vs_eager']:>14.2e}")
    for key in ("capture_s", "compile_s", "compile_error"):
        if key in result:
            print(f"{key}: {result[key]}")


if __name__ == "__main__":
    main()
