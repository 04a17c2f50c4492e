"""Chapter 6 on the H200, in one call: the machine's ceilings, the op table (predicted vs measured),
the decode step's timeline (kernels, GPU time, idle gaps), and the CUDA-graph engine against
chapter 4's engine and against Hugging Face `generate()` with its static cache and torch.compile,
on the same prompt and 256 new tokens. Writes $OUT/ch06_gpu.json (results/gpu/ when OUT is unset;
ch06_gpu_<parts>.json for a subset of --parts) and prints a short table last.

    python chapters/ch06_profiling/gpu_benchmark.py [--parts ceilings roofline timeline engines]
                                                    [--hf-timeout-s 150]
    python chapters/ch06_profiling/gpu_benchmark.py --parts compiled   # -> ch06_gpu_compiled.json

Exit status 1 if the graph engine's greedy tokens differ from chapter 4's (after writing the JSON).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from chapters.ch06_profiling import ceilings, roofline, timeline
from chapters.ch06_profiling.report import REPO, write_json
from shared import config
from shared.contracts import SamplingParams
from shared.model import LoadedModel, load_model

ALL_PARTS = ["ceilings", "roofline", "timeline", "engines"]
PROMPTS = [config.PROMPT, "The capital of France is", "def fibonacci(n):",
           "Once upon a time, in a small village by the sea, there lived"]


def part_ceilings(doc: dict[str, Any], log: Callable[[str], None]) -> None:
    doc["ceilings"] = ceilings.measure("cuda")
    log(ceilings.table(doc["ceilings"]))


def part_roofline(doc: dict[str, Any], loaded: LoadedModel, log: Callable[[str], None]) -> None:
    doc["roofline"] = roofline.experiment(loaded.model, doc["ceilings"], "cuda", log=log)


def part_timeline(doc: dict[str, Any], loaded: LoadedModel, log: Callable[[str], None]) -> None:
    out = {}
    for name, step in timeline.decode_steps(loaded.model, 256, graph=True).items():
        out[name] = timeline.profile_steps(step, "cuda", steps=20)
        log(timeline.format_summary(name, out[name]))
    doc["timeline"] = out


def decode_tok_s(engine: Any, params: SamplingParams) -> dict[str, float]:
    """One greedy request; decode speed from the engine's own TPOT (time after the first token
    over the tokens after it)."""
    result = engine.generate(config.PROMPT, params)
    m = result.metrics
    return {"decode_tok_s": 1000 / m.tpot_ms, "tpot_ms": m.tpot_ms, "ttft_ms": m.ttft_ms,
            "tokens": len(result.output_ids)}


def hf_compiled(tokens: int, timeout_s: float) -> dict[str, Any]:
    """Hugging Face's best in its own process, so a compile that fails or hangs costs only this."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        argv = [sys.executable, "-m", "chapters.ch06_profiling.hf_compiled", "--tokens",
                str(tokens), "--json", f.name]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:.0f} s (compilation included)"}
        try:
            out = json.loads(open(f.name).read())
        except (OSError, json.JSONDecodeError):
            out = {"error": f"no result (exit {proc.returncode})"}
        out["process_s"] = round(time.monotonic() - t0, 1)
        if proc.returncode or "error" in out:
            out["stderr_tail"] = proc.stderr[-2000:]
        return out


def part_engines(doc: dict[str, Any], loaded: LoadedModel, tokens: int, hf_timeout_s: float,
                 log: Callable[[str], None]) -> bool:
    from chapters.ch04_kv_cache.engine import KVCacheEngine
    from chapters.ch06_profiling.engine import CudaGraphEngine

    ch04, graphed = KVCacheEngine(loaded), CudaGraphEngine(loaded)
    out: dict[str, Any] = {"tokens": tokens, "prompt": config.PROMPT}
    # Correctness first: greedy tokens identical to chapter 4's, several prompts.
    check = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    mismatches = []
    for prompt in PROMPTS:
        a, b = ch04.generate(prompt, check).output_ids, graphed.generate(prompt, check).output_ids
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            mismatches.append({"prompt": prompt, "first_difference_at": first})
    out["same_tokens_as_ch04"] = not mismatches
    out["token_mismatches"] = mismatches
    out["prompts_checked"] = len(PROMPTS)
    log(f"graph engine tokens == chapter 4 on {len(PROMPTS)} prompts: {not mismatches}")

    # Speed: chapter 4 and the graph engine alternately, after a warm-up (captures the graph).
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    runs: dict[str, list[dict[str, float]]] = {"ch04_kv_cache": [], "ch06_cuda_graph": []}
    for engine in (ch04, graphed):
        decode_tok_s(engine, params)
    for _ in range(3):
        runs["ch04_kv_cache"].append(decode_tok_s(ch04, params))
        runs["ch06_cuda_graph"].append(decode_tok_s(graphed, params))
    out["runs"] = runs
    med = {k: statistics.median(r["decode_tok_s"] for r in v) for k, v in runs.items()}
    out["decode_tok_s_median"] = med
    out["graph_output_ids"] = graphed.generate(config.PROMPT, params).output_ids

    # The library's best, in a subprocess under a timeout.
    hf = hf_compiled(tokens, hf_timeout_s)
    out["hf_static_compiled"] = hf
    if "decode_tok_s_median" in hf:
        med["hf_static_compiled"] = hf["decode_tok_s_median"]
        out["ratio_graph_over_hf_compiled"] = med["ch06_cuda_graph"] / hf["decode_tok_s_median"]
        out["same_tokens_as_hf_compiled"] = hf.get("output_ids") == out["graph_output_ids"]
    out["ratio_graph_over_ch04"] = med["ch06_cuda_graph"] / med["ch04_kv_cache"]

    # The floor: every weight read once per step at the measured bandwidth.
    weight_bytes = sum(p.numel() * p.element_size() for p in graphed.model.parameters())
    bw = doc["ceilings"]["memory_bandwidth"]["bytes_per_s"] if "ceilings" in doc else None
    if bw:
        floor = weight_bytes / bw
        out["bandwidth_floor"] = {"weight_bytes": weight_bytes, "bytes_per_s": bw,
                                  "floor_s_per_step": floor,
                                  "graph_tpot_over_floor": (1 / med["ch06_cuda_graph"]) / floor}
    doc["engines"] = out
    return not mismatches


def part_compiled(doc: dict[str, Any], loaded: LoadedModel, tokens: int,
                  log: Callable[[str], None]) -> None:
    """Not in the default run (compiling takes a minute or more): the graph engine with its step
    fused by torch.compile before capture, against the plain graph engine, alternately. A preview
    of chapter 7: what fewer, bigger kernels buy once the host is gone. Its tokens are checked
    against chapter 4's and recorded, not required: fused kernels round differently."""
    from chapters.ch04_kv_cache.engine import KVCacheEngine
    from chapters.ch06_profiling.engine import CudaGraphEngine

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    # One bucket (512 slots) holds the prompt and 256 tokens: one compile, one capture.
    plain = CudaGraphEngine(loaded, min_cache_len=512)
    fused = CudaGraphEngine(loaded, min_cache_len=512, compile_step=True)
    out: dict[str, Any] = {"tokens": tokens, "mode": "torch.compile default (inductor), then captured"}
    t0 = time.perf_counter()
    decode_tok_s(fused, params)
    out["compile_and_capture_s"] = time.perf_counter() - t0
    decode_tok_s(plain, params)
    ch04 = KVCacheEngine(loaded)
    check = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    out["same_tokens_as_ch04"] = [fused.generate(p, check).output_ids == ch04.generate(p, check).output_ids
                                  for p in PROMPTS]
    runs: dict[str, list[dict[str, float]]] = {"ch06_cuda_graph": [], "ch06_cuda_graph_compiled": []}
    for _ in range(3):
        runs["ch06_cuda_graph"].append(decode_tok_s(plain, params))
        runs["ch06_cuda_graph_compiled"].append(decode_tok_s(fused, params))
    out["runs"] = runs
    out["decode_tok_s_median"] = {k: statistics.median(r["decode_tok_s"] for r in v)
                                  for k, v in runs.items()}
    for name, engine in (("plain", plain), ("compiled", fused)):
        step = engine._steps[512]
        out[f"timeline_{name}"] = timeline.profile_steps(lambda step=step: step(5, 300).argmax(),
                                                         "cuda", steps=20)
        log(timeline.format_summary(f"graph step, {name}", out[f"timeline_{name}"]))
    doc["compiled"] = out


def final_table(doc: dict[str, Any]) -> str:
    lines = ["", "=== chapter 6 on " + doc["device_name"] + " ==="]
    if "ceilings" in doc:
        c = doc["ceilings"]
        lines.append(f"bandwidth {c['memory_bandwidth']['bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul "
                     f"{c['matmul']['flop_per_s'] / 1e12:.0f} TFLOP/s, ridge "
                     f"{c['ridge_flop_per_byte']:.0f} FLOP/B, tiny op "
                     f"{c['op_overhead']['per_op_s'] * 1e6:.1f} us")
    if "roofline" in doc:
        d, p = doc["roofline"]["decode_totals"], doc["roofline"]["prefill_totals"]
        lines.append(f"decode step (ops alone): roofline {d['predicted_s'] * 1e6:.0f} us, measured "
                     f"{d['measured_s'] * 1e6:.0f} us; prefill {p['predicted_s'] * 1e6:.0f} / "
                     f"{p['measured_s'] * 1e6:.0f} us")
    for name, s in doc.get("timeline", {}).items():
        if "kernels_per_step" in s:
            lines.append(f"{name:<11} {s['wall_per_step_s'] * 1e6:7.0f} us/step, "
                         f"{s['kernels_per_step']:5.0f} kernels, GPU busy "
                         f"{s['gpu_busy_s_per_step'] * 1e6:6.0f} us, idle "
                         f"{s['gpu_idle_s_per_step'] * 1e6:6.0f} us ({s['gpu_idle_fraction']:.0%})")
    e = doc.get("engines")
    if e:
        lines.append(f"{'engine':<22}{'decode tok/s':>14}")
        for k, v in e["decode_tok_s_median"].items():
            lines.append(f"{k:<22}{v:>14.1f}")
        if "ratio_graph_over_hf_compiled" in e:
            lines.append(f"graph / HF static+compile: {e['ratio_graph_over_hf_compiled']:.2f}x "
                         f"(target >= 1.5x)")
        else:
            lines.append(f"HF static+compile: {e['hf_static_compiled'].get('error', 'no result')}")
        if "bandwidth_floor" in e:
            f = e["bandwidth_floor"]
            lines.append(f"bandwidth floor {f['floor_s_per_step'] * 1e6:.0f} us/step; graph step is "
                         f"{f['graph_tpot_over_floor']:.1f}x the floor")
        lines.append(f"tokens == chapter 4: {e['same_tokens_as_ch04']}")
    c = doc.get("compiled")
    if c:
        med = c["decode_tok_s_median"]
        lines.append(f"graph {med['ch06_cuda_graph']:.1f} tok/s, graph + torch.compile "
                     f"{med['ch06_cuda_graph_compiled']:.1f} tok/s "
                     f"({med['ch06_cuda_graph_compiled'] / med['ch06_cuda_graph']:.2f}x); compile+capture "
                     f"{c['compile_and_capture_s']:.0f} s; tokens == ch04 per prompt: "
                     f"{c['same_tokens_as_ch04']}")
    for part, err in doc.get("errors", {}).items():
        lines.append(f"{part} FAILED: {err.splitlines()[-1]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=ALL_PARTS, choices=[*ALL_PARTS, "compiled"],
                        help="'compiled' (not in the default) fuses the graph step with torch.compile")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--hf-timeout-s", type=float, default=150.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("this script measures a GPU; on a CPU run 00_ceilings.py ... 04_cuda_graph.py")
    t0 = time.monotonic()
    doc: dict[str, Any] = {"device": "cuda", "device_name": torch.cuda.get_device_name(0),
                           "parts": args.parts, "errors": {}, "part_seconds": {}}
    log = lambda line: print(line, flush=True)  # noqa: E731
    loaded = load_model(device="cuda")
    doc["model_manifest_sha256"] = loaded.manifest_sha256
    identical = True
    steps: dict[str, Callable[[], Any]] = {
        "ceilings": lambda: part_ceilings(doc, log),
        "roofline": lambda: part_roofline(doc, loaded, log),
        "timeline": lambda: part_timeline(doc, loaded, log),
        "engines": lambda: part_engines(doc, loaded, args.tokens, args.hf_timeout_s, log),
        "compiled": lambda: part_compiled(doc, loaded, args.tokens, log),
    }
    if "ceilings" not in args.parts and {"roofline", "engines"} & set(args.parts):
        args.parts = ["ceilings", *args.parts]  # the roofline and the floor need them
    for part in args.parts:
        p0 = time.monotonic()
        try:
            if steps[part]() is False:
                identical = False
        except Exception:
            doc["errors"][part] = traceback.format_exc()[-3000:]
            log(f"{part} failed:\n{doc['errors'][part]}")
        doc["part_seconds"][part] = round(time.monotonic() - p0, 1)
    doc["total_seconds"] = round(time.monotonic() - t0, 1)
    # A partial run (e.g. the engines alone, when the whole would not fit one call) gets its own
    # file, so it never overwrites a complete one.
    name = "ch06_gpu" if set(args.parts) == set(ALL_PARTS) else "ch06_gpu_" + "_".join(args.parts)
    path = write_json(f"{name}.json", doc, "cuda")
    log(f"wrote {path}")
    log(final_table(doc))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
