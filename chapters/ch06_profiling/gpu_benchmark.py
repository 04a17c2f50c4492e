"""Chapter 6 on the H200, in one call: the machine's ceilings, the op table (predicted vs measured),
the decode step's timeline (kernels, GPU time, idle gaps), and the CUDA-graph engine against
chapter 4's engine and against Hugging Face `generate()` with its static cache and torch.compile,
on the same prompt and 256 new tokens. Writes $OUT/ch06_gpu.json (results/gpu/ when OUT is unset;
ch06_gpu_<parts>.json for a subset of --parts) and prints a short table last.

    python chapters/ch06_profiling/gpu_benchmark.py [--parts ceilings roofline timeline engines]
                                                    [--hf-timeout-s 150] [--check-tokens 64]
    python chapters/ch06_profiling/gpu_benchmark.py --parts compiled   # -> ch06_gpu_compiled.json
    python chapters/ch06_profiling/gpu_benchmark.py --smoke            # CPU, tiny model: code paths

The token check compares the graph engine's greedy tokens with chapter 4's twice: in the engine's
dtype (bf16 on a GPU) and in float32, each with the logits every step chose from, so that a
difference comes with the reference's top-2 logit gap where the tokens part (token_check.py).
'compiled' (not in the default: compiling takes a minute or more) runs in its own process under
--compiled-timeout-s, so a compile that fails or hangs costs only its own entry.

Exit status 1 if the graph engine's float32 greedy tokens differ from chapter 4's (the same
arithmetic must give the same tokens there; bf16 differences are recorded with their logit gaps).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from chapters.ch06_profiling import ceilings, roofline, timeline, token_check
from chapters.ch06_profiling.report import REPO, write_json
from shared import config
from shared.contracts import SamplingParams
from shared.model import LoadedModel, load_model, tiny_model

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


def run_child(args: list[str], timeout_s: float) -> dict[str, Any]:
    """`python -m <args> --json FILE` in its own process group, killed (with any compile workers
    it started) after `timeout_s`; its JSON, or why there is none. For work that can hang or crash
    and cannot be interrupted from inside: compiling."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        argv = [sys.executable, "-m", *args, "--json", f.name]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this function started, nothing else
            proc.communicate()
            return {"error": f"timed out after {timeout_s:.0f} s (compilation included)",
                    "process_s": round(time.monotonic() - t0, 1)}
        try:
            out = json.loads(Path(f.name).read_text())
        except (OSError, json.JSONDecodeError):
            out = {"error": f"no result (exit {proc.returncode})"}
        out["process_s"] = round(time.monotonic() - t0, 1)
        if proc.returncode or "error" in out:
            out["stderr_tail"] = stderr[-2000:]
        return out


def part_tokens(loaded: LoadedModel, load_fp32: Callable[[], LoadedModel], check_tokens: int,
                log: Callable[[str], None]) -> dict[str, Any]:
    """Greedy tokens of the graph engine against chapter 4's on PROMPTS, in the engine's dtype and
    again with the model in float32 (the same arithmetic in a dtype where rounding cannot flip a
    choice unless the two logits are within ~1e-5 of each other)."""
    from chapters.ch04_kv_cache.engine import KVCacheEngine
    from chapters.ch06_profiling.engine import CudaGraphEngine

    params = SamplingParams(temperature=0.0, max_tokens=check_tokens, ignore_eos=True)
    out: dict[str, Any] = {"dtype": str(next(loaded.model.parameters()).dtype).removeprefix("torch.")}
    out["model_dtype"] = token_check.check(KVCacheEngine(loaded), CudaGraphEngine(loaded), PROMPTS, params)
    log(f"graph engine vs chapter 4, {out['dtype']}: {token_check.summary(out['model_dtype'])}")
    fp32 = load_fp32()
    out["float32"] = token_check.check(KVCacheEngine(fp32), CudaGraphEngine(fp32), PROMPTS, params)
    # Recorded because it decides what "float32" means for a matmul on a GPU (TF32 or not).
    out["float32"]["matmul_precision"] = torch.get_float32_matmul_precision()
    log(f"graph engine vs chapter 4, float32: {token_check.summary(out['float32'])}")
    del fp32
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def part_engines(doc: dict[str, Any], loaded: LoadedModel, load_fp32: Callable[[], LoadedModel],
                 tokens: int, check_tokens: int, hf_timeout_s: float | None,
                 log: Callable[[str], None]) -> bool:
    """Tokens first (see part_tokens), then decode speed: chapter 4 and the graph engine
    alternately, and the library's best in its own process (`hf_timeout_s` None: skipped).
    Returns whether the float32 tokens are identical."""
    from chapters.ch04_kv_cache.engine import KVCacheEngine
    from chapters.ch06_profiling.engine import CudaGraphEngine

    out: dict[str, Any] = {"tokens": tokens, "prompt": config.PROMPT}
    checks = part_tokens(loaded, load_fp32, check_tokens, log)
    out["token_check"] = checks
    # The fields the first run wrote, kept: the book quotes them.
    out["same_tokens_as_ch04"] = checks["model_dtype"]["identical"]
    out["token_mismatches"] = [r for r in checks["model_dtype"]["per_prompt"] if not r["identical"]]
    out["prompts_checked"] = len(PROMPTS)
    out["same_tokens_as_ch04_float32"] = checks["float32"]["identical"]

    # Speed: chapter 4 and the graph engine alternately, after a warm-up (captures the graph).
    ch04, graphed = KVCacheEngine(loaded), CudaGraphEngine(loaded)
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
    out["ratio_graph_over_ch04"] = med["ch06_cuda_graph"] / med["ch04_kv_cache"]

    # The library's best, in a subprocess under a timeout.
    if hf_timeout_s is not None:
        hf = run_child(["chapters.ch06_profiling.hf_compiled", "--tokens", str(tokens)], hf_timeout_s)
        out["hf_static_compiled"] = hf
        if "decode_tok_s_median" in hf:
            med["hf_static_compiled"] = hf["decode_tok_s_median"]
            out["ratio_graph_over_hf_compiled"] = med["ch06_cuda_graph"] / hf["decode_tok_s_median"]
            out["same_tokens_as_hf_compiled"] = hf.get("output_ids") == out["graph_output_ids"]
            out["first_difference_vs_hf_compiled"] = token_check.first_difference(
                hf.get("output_ids", []), out["graph_output_ids"])

    # The floor: every weight read once per step at the measured bandwidth.
    weight_bytes = sum(p.numel() * p.element_size() for p in graphed.model.parameters())
    bw = doc["ceilings"]["memory_bandwidth"]["bytes_per_s"] if "ceilings" in doc else None
    if bw:
        floor = weight_bytes / bw
        out["bandwidth_floor"] = {"weight_bytes": weight_bytes, "bytes_per_s": bw,
                                  "floor_s_per_step": floor,
                                  "graph_tpot_over_floor": (1 / med["ch06_cuda_graph"]) / floor}
    doc["engines"] = out
    return checks["float32"]["identical"]


def measure_compiled(loaded: LoadedModel, tokens: int, check_tokens: int,
                     log: Callable[[str], None]) -> dict[str, Any]:
    """The graph engine with its step fused by torch.compile before capture, against the plain
    graph engine, alternately: a preview of chapter 7, what fewer, bigger kernels buy once the host
    is gone. Its tokens are compared with chapter 4's and recorded, not required: fused kernels
    round differently. Runs in a child process (`--compiled-child`), see part_compiled."""
    from chapters.ch04_kv_cache.engine import KVCacheEngine
    from chapters.ch06_profiling.engine import CudaGraphEngine

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    needed = len(KVCacheEngine(loaded).encode(config.PROMPT)) + tokens
    # One bucket holds the prompt and its tokens: one compile, one capture per engine.
    size = 1 << max(8, (needed - 1).bit_length())
    plain = CudaGraphEngine(loaded, min_cache_len=size)
    fused = CudaGraphEngine(loaded, min_cache_len=size, compile_mode="default")
    out: dict[str, Any] = {"tokens": tokens, "cache_len": size,
                           "mode": "torch.compile default (inductor), then captured"}
    t0 = time.perf_counter()
    decode_tok_s(fused, params)
    out["compile_and_capture_s"] = time.perf_counter() - t0
    log(f"compiled and captured in {out['compile_and_capture_s']:.0f} s")
    decode_tok_s(plain, params)
    check = SamplingParams(temperature=0.0, max_tokens=check_tokens, ignore_eos=True)
    out["token_check"] = token_check.check(KVCacheEngine(loaded), fused, PROMPTS, check)
    out["same_tokens_as_ch04"] = [r["identical"] for r in out["token_check"]["per_prompt"]]
    log(f"compiled graph engine vs chapter 4: {token_check.summary(out['token_check'])}")
    runs: dict[str, list[dict[str, float]]] = {"ch06_cuda_graph": [], "ch06_cuda_graph_compiled": []}
    for _ in range(3):
        runs["ch06_cuda_graph"].append(decode_tok_s(plain, params))
        runs["ch06_cuda_graph_compiled"].append(decode_tok_s(fused, params))
    out["runs"] = runs
    out["decode_tok_s_median"] = {k: statistics.median(r["decode_tok_s"] for r in v)
                                  for k, v in runs.items()}
    device = str(next(loaded.model.parameters()).device)
    position = min(300, size - 1)
    for name, engine in (("plain", plain), ("compiled", fused)):
        step = engine.step_for(size)  # the step the requests above ran on: built already
        out[f"timeline_{name}"] = timeline.profile_steps(
            lambda step=step: step(5, position).argmax(), device, steps=20)
        log(timeline.format_summary(f"graph step, {name}", out[f"timeline_{name}"]))
    return out


def part_compiled(doc: dict[str, Any], tokens: int, check_tokens: int, timeout_s: float,
                  smoke: bool) -> None:
    args = ["chapters.ch06_profiling.gpu_benchmark", "--compiled-child", "--tokens", str(tokens),
            "--check-tokens", str(check_tokens), *(["--smoke"] if smoke else [])]
    doc["compiled"] = run_child(args, timeout_s)
    if "error" in doc["compiled"]:
        raise RuntimeError(f"compiled: {doc['compiled']['error']}")


def compiled_child(json_path: str, smoke: bool, tokens: int, check_tokens: int) -> None:
    """The child process of part_compiled: measure, write the JSON, even on failure."""
    try:
        out = measure_compiled(load(smoke), tokens, check_tokens, lambda line: print(line, flush=True))
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    Path(json_path).write_text(json.dumps(out, indent=1, default=str))


def load(smoke: bool, dtype: torch.dtype | None = None) -> LoadedModel:
    """The real model on the GPU, or for --smoke the tiny random one on the CPU (float32 only)."""
    return tiny_model(seed=0) if smoke else load_model(device="cuda", dtype=dtype)


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
                         f"{s['gpu_idle_s_per_step'] * 1e6:6.0f} us ({s['gpu_idle_fraction']:.0%}), "
                         f"median gap {s.get('gpu_gap_us_median', float('nan')):.1f} us, idle in "
                         f"gaps >= 10 us {s.get('gpu_idle_in_large_gaps_s_per_step', float('nan')) * 1e6:.0f} us")
    e = doc.get("engines")
    if e:
        lines.append(f"{'engine':<22}{'decode tok/s':>14}")
        for k, v in e["decode_tok_s_median"].items():
            lines.append(f"{k:<22}{v:>14.1f}")
        if "ratio_graph_over_hf_compiled" in e:
            lines.append(f"graph / HF static+compile: {e['ratio_graph_over_hf_compiled']:.2f}x "
                         f"(target >= 1.5x)")
        elif "hf_static_compiled" in e:
            lines.append(f"HF static+compile: {e['hf_static_compiled'].get('error', 'no result')}")
        if "bandwidth_floor" in e:
            f = e["bandwidth_floor"]
            lines.append(f"bandwidth floor {f['floor_s_per_step'] * 1e6:.0f} us/step; graph step is "
                         f"{f['graph_tpot_over_floor']:.1f}x the floor")
        checks = e.get("token_check", {})
        for key, label in (("model_dtype", checks.get("dtype")), ("float32", "float32")):
            if key in checks:
                lines.append(f"tokens vs chapter 4 ({label}): {token_check.summary(checks[key])}")
    c = doc.get("compiled")
    if c and "decode_tok_s_median" in c:
        med = c["decode_tok_s_median"]
        lines.append(f"graph {med['ch06_cuda_graph']:.1f} tok/s, graph + torch.compile "
                     f"{med['ch06_cuda_graph_compiled']:.1f} tok/s "
                     f"({med['ch06_cuda_graph_compiled'] / med['ch06_cuda_graph']:.2f}x); compile+capture "
                     f"{c['compile_and_capture_s']:.0f} s")
        lines.append(f"compiled graph tokens vs chapter 4: {token_check.summary(c['token_check'])}")
    for part, err in doc.get("errors", {}).items():
        lines.append(f"{part} FAILED: {err.splitlines()[-1]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=None, choices=[*ALL_PARTS, "compiled"],
                        help="default: all but 'compiled', which fuses the graph step with "
                             "torch.compile in its own process")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--check-tokens", type=int, default=64,
                        help="greedy tokens per prompt in the token checks")
    parser.add_argument("--hf-timeout-s", type=float, default=150.0)
    parser.add_argument("--compiled-timeout-s", type=float, default=300.0)
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, tiny random model, engines only (no HF baseline): the code paths "
                             "run, the numbers mean nothing; writes to the temp folder")
    parser.add_argument("--compiled-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)  # the child's output file
    args = parser.parse_args()
    for name in ("tokens", "check_tokens"):
        if getattr(args, name) < 2:
            parser.error(f"--{name.replace('_', '-')} must be at least 2, got {getattr(args, name)}")
    if args.compiled_child:
        compiled_child(args.json, args.smoke, args.tokens, args.check_tokens)
        return 0
    if not args.smoke and not torch.cuda.is_available():
        parser.error("this script measures a GPU; on a CPU run 00_ceilings.py ... 04_cuda_graph.py, "
                     "or this script with --smoke")
    parts = args.parts or (["engines"] if args.smoke else ALL_PARTS)
    if args.smoke and {"ceilings", "roofline", "timeline"} & set(parts):
        parser.error("--smoke runs the engines and compiled parts only")
    t0 = time.monotonic()
    device = "cpu" if args.smoke else "cuda"
    doc: dict[str, Any] = {"device": device, "parts": parts, "errors": {}, "part_seconds": {},
                           "device_name": "CPU (smoke)" if args.smoke else torch.cuda.get_device_name(0)}
    log = lambda line: print(line, flush=True)  # noqa: E731
    loaded = load(args.smoke)
    doc["model_manifest_sha256"] = loaded.manifest_sha256
    identical = True
    steps: dict[str, Callable[[], Any]] = {
        "ceilings": lambda: part_ceilings(doc, log),
        "roofline": lambda: part_roofline(doc, loaded, log),
        "timeline": lambda: part_timeline(doc, loaded, log),
        "engines": lambda: part_engines(
            doc, loaded, lambda: load(args.smoke, torch.float32), args.tokens, args.check_tokens,
            None if args.smoke else args.hf_timeout_s, log),
        "compiled": lambda: part_compiled(doc, args.tokens, args.check_tokens,
                                          args.compiled_timeout_s, args.smoke),
    }
    if not args.smoke and "ceilings" not in parts and {"roofline", "engines"} & set(parts):
        parts = ["ceilings", *parts]  # the roofline and the floor need them
    for part in parts:
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
    # file, so it never overwrites a complete one; 'compiled' may ride along with a complete one.
    name = "ch06_gpu" if set(ALL_PARTS) <= set(parts) else "ch06_gpu_" + "_".join(parts)
    if args.smoke:
        path = Path(tempfile.gettempdir()) / "ch06_gpu_smoke.json"
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    else:
        path = write_json(f"{name}.json", doc, device)
    log(f"wrote {path}")
    log(final_table(doc))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
