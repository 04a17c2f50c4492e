"""The strongest library baseline for a batch-1 decode on a GPU: Hugging Face `generate()` with its
static cache, which (transformers 5.x) compiles the decode step with `torch.compile(mode=
"reduce-overhead")`, i.e. inductor kernels replayed from CUDA graphs.

Run as its own process by gpu_benchmark.py, under a timeout: compilation can take minutes and cannot
be interrupted from inside, so a slow or failing compile costs this measurement, not the whole run.

    python -m chapters.ch06_profiling.hf_compiled --tokens 256 --json /tmp/hf.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from typing import Any

import torch
from transformers.generation.streamers import BaseStreamer

from chapters.ch01_baseline.engine import BaselineEngine
from shared import config
from shared.contracts import SamplingParams
from shared.model import load_model


class _Clock(BaseStreamer):
    """Timestamps each new token as generate() hands it over (the prompt comes first: skipped).
    generate() reads a flag back from the GPU every step, so host time tracks GPU progress."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self._prompt_seen:
            self.times.append(time.perf_counter())
        self._prompt_seen = True

    def end(self) -> None:
        pass


def timed_generate(model: Any, ids: torch.Tensor, kwargs: dict[str, Any]) -> dict[str, Any]:
    """One generate(): time to first token, decode tokens/s after it, and the tokens.

    Decode speed is taken between the first and the last token of the same call, so one call
    measures both and the static cache keeps one size (a different max_new_tokens would size a
    new cache and could trigger a recompilation)."""
    clock = _Clock()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), streamer=clock, **kwargs)
    torch.cuda.synchronize()
    t = clock.times
    return {"ttft_s": t[0] - t0, "decode_tok_s": (len(t) - 1) / (t[-1] - t[0]),
            "total_s": time.perf_counter() - t0, "output_ids": out[0, ids.shape[1]:].tolist()}


def kernels_per_token(model: Any, ids: torch.Tensor, kwargs: dict[str, Any]) -> float:
    """GPU kernels per generated token over one profiled generate() (the prefill's few hundred
    kernels are spread over all tokens). Kernels replayed from a CUDA graph count only where the
    profiler sees inside graphs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        timed_generate(model, ids, kwargs)
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    return kernels / kwargs["max_new_tokens"]


def measure(tokens: int, repeats: int) -> dict[str, Any]:
    loaded = load_model(device="cuda")
    engine = BaselineEngine(loaded)
    ids = torch.tensor([engine.encode(config.PROMPT)], device="cuda")
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    kwargs = {**engine.generation_kwargs(params), "cache_implementation": "static"}
    result: dict[str, Any] = {"tokens": tokens, "prompt_tokens": ids.shape[1],
                              "recipe": "generate(..., cache_implementation='static'): transformers "
                                        "compiles the decode step (CompileConfig default: "
                                        "mode='reduce-overhead')"}
    t0 = time.perf_counter()
    for _ in range(2):  # the first call compiles; the second runs the captured graphs once
        first = timed_generate(loaded.model, ids, kwargs)
    result["warmup_s"] = time.perf_counter() - t0
    result["compiled"] = hasattr(loaded.model, "_compiled_call")
    result["output_ids"] = first["output_ids"]
    runs = [timed_generate(loaded.model, ids, kwargs) for _ in range(repeats)]
    decode = [r["decode_tok_s"] for r in runs]
    result.update(runs=[{k: v for k, v in r.items() if k != "output_ids"} for r in runs],
                  decode_tok_s=decode, decode_tok_s_median=statistics.median(decode),
                  tpot_ms_median=1000 / statistics.median(decode),
                  ttft_ms_median=1000 * statistics.median(r["ttft_s"] for r in runs))
    try:
        result["kernels_per_token"] = kernels_per_token(loaded.model, ids, kwargs)
    except Exception as exc:  # the profiler is a nice-to-have here
        result["kernels_per_token_error"] = f"{type(exc).__name__}: {exc}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    try:
        result = measure(args.tokens, args.repeats)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("output_ids", "traceback")}))


if __name__ == "__main__":
    main()
