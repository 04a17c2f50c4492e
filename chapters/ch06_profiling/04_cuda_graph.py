"""The graph-captured decode step, alone: one static step run eagerly against the same step replayed
from a CUDA graph (GPU), or against the same step through torch.compile (CPU, where there are no
graphs to capture: does compiling help there?). Same model, same cache contents, same token; the
logits are compared and the per-step time measured as an engine sees it (each step waits for its
result). Writes results/cpu/ch06_cuda_graph.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/04_cuda_graph.py [--context 256] [--no-compile] [--compile-timeout-s 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
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


def compiled_variant(args: argparse.Namespace) -> dict[str, Any]:
    """Run by a child process (see main): torch.compile the static step and time it."""
    model, prompt, size = setup(args)
    out: dict[str, Any] = {}
    with torch.inference_mode():
        step = DecodeStep(model, StaticKVCache.for_model(model, size))
        step.prefill(prompt)
        reference = step(prompt[-1], args.context).clone()  # also fills the input buffers
        compiled_forward = torch.compile(step._forward)
        t0 = time.perf_counter()
        compiled_forward()
        out["compile_s"] = time.perf_counter() - t0
        out.update(measure(lambda: compiled_forward()[0], reference, 2))
        # The speed-up is a ratio taken in one run: eager and compiled steps alternate.
        eager_s, compiled_s = [], []
        for _ in range(args.steps or 10):
            eager_s += per_step_seconds(lambda: step._forward()[0], 1)
            compiled_s += per_step_seconds(lambda: compiled_forward()[0], 1)
        out.update(median_step_s=statistics.median(compiled_s), min_step_s=min(compiled_s),
                   eager_alternating_median_step_s=statistics.median(eager_s),
                   speedup_vs_eager_alternating=statistics.median(eager_s) / statistics.median(compiled_s))
    return out


def setup(args: argparse.Namespace) -> tuple[Any, list[int], int]:
    loaded = load_model(device=args.device)
    model = from_hf(loaded.model)
    prompt = torch.randint(0, model.config.vocab_size, (args.context,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    return model, prompt, bucket(args.context + 1)


def measure(fn: Callable[[], torch.Tensor], reference: torch.Tensor, steps: int) -> dict[str, Any]:
    fn()  # warm-up
    diff = (fn().float() - reference.float()).abs().max().item()
    times = per_step_seconds(fn, steps)
    return {"median_step_s": statistics.median(times), "min_step_s": min(times),
            "max_abs_logit_diff_vs_eager": diff,
            "same_greedy_token": int(fn().argmax()) == int(reference.argmax())}


def compile_in_child(args: argparse.Namespace) -> dict[str, Any]:
    """torch.compile cannot be interrupted from inside, and on a small shared CPU compiling the
    30-layer step can take many minutes: run it in a child process under a timeout."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        argv = [sys.executable, __file__, "--device", args.device, "--context", str(args.context),
                "--threads", str(args.threads), "--compiled-child", f.name]
        t0 = time.perf_counter()
        try:
            subprocess.run(argv, timeout=args.compile_timeout_s, capture_output=True, check=True)
            return json.loads(open(f.name).read())
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish within {args.compile_timeout_s:.0f} s "
                             f"(compilation included)", "seconds": time.perf_counter() - t0}
        except (subprocess.CalledProcessError, json.JSONDecodeError) as exc:
            return {"error": f"{type(exc).__name__}: {str(exc)[-500:]}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (see 00_ceilings.py)")
    parser.add_argument("--no-compile", action="store_true", help="CPU: skip torch.compile")
    parser.add_argument("--compile-timeout-s", type=float, default=300.0)
    parser.add_argument("--compiled-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    pin_threads(args.device, args.threads)
    if args.compiled_child:
        with open(args.compiled_child, "w") as f:
            json.dump(compiled_variant(args), f)
        return
    cuda = args.device.startswith("cuda")
    steps = args.steps or (200 if cuda else 10)
    model, prompt, size = setup(args)
    result: dict[str, Any] = {"device": args.device, "context": args.context, "cache_len": size,
                              "steps": steps, "variants": {}}
    with torch.inference_mode():
        eager = DecodeStep(model, StaticKVCache.for_model(model, size))
        eager.prefill(prompt)
        reference = eager(prompt[-1], args.context).clone()
        result["variants"]["eager"] = measure(lambda: eager(prompt[-1], args.context), reference,
                                              steps)
        if cuda:
            graphed = DecodeStep(model, StaticKVCache.for_model(model, size))
            t0 = time.perf_counter()
            graphed.capture()  # before the prefill: capturing runs the step at position 0
            result["capture_s"] = time.perf_counter() - t0
            graphed.prefill(prompt)
            result["variants"]["cuda_graph"] = measure(
                lambda: graphed(prompt[-1], args.context), reference, steps)
    if not cuda and not args.no_compile:
        compiled = compile_in_child(args)
        if "error" in compiled:
            result["compile_error"] = compiled["error"]
        else:
            result["compile_s"] = compiled.pop("compile_s")
            result["variants"]["torch_compile"] = compiled
    eager_s = result["variants"]["eager"]["median_step_s"]
    print(f"wrote {write_json('ch06_cuda_graph.json', result, args.device)}")
    print(f"{'step':<16}{'ms/step':>10}{'speed-up':>10}{'max |dlogit|':>14}")
    for name, v in result["variants"].items():
        # torch.compile ran in a child process: its speed-up is against eager steps alternating
        # with it there, not against this process's eager steps taken minutes earlier.
        speedup = v.get("speedup_vs_eager_alternating", eager_s / v["median_step_s"])
        print(f"{name:<16}{v['median_step_s'] * 1e3:>10.3f}{speedup:>10.2f}"
              f"{v['max_abs_logit_diff_vs_eager']:>14.2e}")
    for key in ("capture_s", "compile_s", "compile_error"):
        if key in result:
            print(f"{key}: {result[key]}")


if __name__ == "__main__":
    main()
