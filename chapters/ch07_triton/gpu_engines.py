"""Chapters 6, 7 and 8's engines on the H200, in one call: tokens, kernels per step, decode speed
against Hugging Face `generate` (static cache + torch.compile) and against torch.compile of chapter
3's model, and chapter 8's prefill against chapter 7's.

    python chapters/ch07_triton/gpu_engines.py            # on the GPU; JSON to $OUT or results/gpu/
    python chapters/ch07_triton/gpu_engines.py --smoke    # anywhere: tiny model, interpreter, 4 tokens

What it does, in order (the JSON is rewritten after every part, so a run cut short keeps its parts):

1. warm-up: chapter 6, 7 and 8's engines each serve the seed book's prompt once (captures their
   graphs; chapter 7's Triton autotuner runs here, before capture). Then the baselines start, each
   in its own process (compilation cannot be interrupted from inside; a child that is not ready in
   time is killed and recorded as such): HF generate with its static cache (transformers compiles
   the decode step, mode="reduce-overhead"), and chapter 6's engine with its decode step put
   through torch.compile (--compile-modes; default "default" and "max-autotune-no-cudagraphs"),
   then captured in chapter 6's CUDA graph.
2. tokens: the prompt, --tokens new tokens, greedy, EOS ignored, through chapters 6, 7 and 8, with
   every step's logits kept: first differing position (if any), the logit gap there, and the
   largest logit difference before it; three more prompts at 64 tokens.
3. kernels per decode step: torch.profiler over chapter 6's and chapter 7's step run eagerly,
   outside the graph (what the graph records and replays).
4. decode speed: --rounds rounds; each runs chapters 6, 7 and 8 once (order rotating), then hands
   one baseline process its turn: in-process engines alternate run by run, the baselines phase by
   phase. Median, min and max of decode tokens/s (TPOT after the first token).
5. prefill (chapter 8 vs 7): one prompt per length in --prefill-lengths, alternating, median of
   --prefill-reps; peak memory above the baseline; the first token and logits compared.

Writes ch07_engines.json (ch07_engines_smoke.json with --smoke) and prints a short table last.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chapters.ch07_triton.interpret import INTERPRET  # sets TRITON_INTERPRET before triton loads

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch

from chapters.ch06_profiling.engine import CudaGraphEngine
from chapters.ch06_profiling.graph import bucket
from chapters.ch06_profiling.timeline import profile_steps
from chapters.ch06_profiling.token_check import first_difference, record_logits
from chapters.ch07_triton.engine import TritonEngine
from chapters.ch08_flash_attention.engine import FlashAttentionEngine
from shared import config
from shared.benchmark.provenance import REPO_ROOT, provenance, save_results
from shared.contracts import SamplingParams
from shared.model import LoadedModel, load_model, tiny_model

EXTRA_PROMPTS = ["The capital of France is", "def fibonacci(n):",
                 "Once upon a time, in a small village by the sea, there lived"]
ENGINES = ("ch06_cuda_graph", "ch07_triton", "ch08_flash_attention")
TAG = "@@"  # marks the protocol lines a baseline process prints (libraries print other things)


def load(smoke: bool) -> LoadedModel:
    return tiny_model(seed=0, layers=1) if smoke else load_model()


# ---- the baselines, each in its own process --------------------------------------------------


def decode_run(engine: Any, params: SamplingParams) -> dict[str, Any]:
    """One greedy request of the seed prompt; decode speed from the engine's TPOT (time after the
    first token over the tokens after it), the same definition hf_compiled.py uses."""
    result = engine.generate(config.PROMPT, params)
    m = result.metrics
    return {"decode_tok_s": 1000 / m.tpot_ms if m.tpot_ms else 0.0, "tpot_ms": m.tpot_ms,
            "ttft_ms": m.ttft_ms, "tokens": len(result.output_ids), "output_ids": result.output_ids}


class HFRunner:
    """HF generate with cache_implementation="static": transformers compiles the decode step itself
    on a GPU (chapters/ch06_profiling/hf_compiled.py's recipe and clock, reused)."""

    def __init__(self, smoke: bool, tokens: int) -> None:
        from chapters.ch01_baseline.engine import BaselineEngine

        self.loaded = load(smoke)
        engine = BaselineEngine(self.loaded)
        self.device = engine.device
        self.ids = torch.tensor([engine.encode(config.PROMPT)], device=self.device)
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        self.kwargs = {**engine.generation_kwargs(params), "cache_implementation": "static"}

    def _timed(self) -> dict[str, Any]:
        from chapters.ch06_profiling.hf_compiled import timed_generate

        if self.device.type == "cuda":
            r = timed_generate(self.loaded.model, self.ids, self.kwargs)
        else:  # the CPU smoke test: nothing to synchronise
            with mock.patch("torch.cuda.synchronize"):
                r = timed_generate(self.loaded.model, self.ids, self.kwargs)
        return {"decode_tok_s": r["decode_tok_s"], "tpot_ms": 1000 / r["decode_tok_s"],
                "ttft_ms": 1000 * r["ttft_s"], "tokens": len(r["output_ids"]), "output_ids": r["output_ids"]}

    def warm(self) -> dict[str, Any]:
        for _ in range(2):  # the first call compiles; the second replays the captured graphs once
            first = self._timed()
        info: dict[str, Any] = {"compiled": hasattr(self.loaded.model, "_compiled_call"),
                                "output_ids": first["output_ids"],
                                "implementation": "transformers generate, static cache, auto-compiled decode"}
        if self.device.type == "cuda":
            from chapters.ch06_profiling.hf_compiled import kernels_per_token

            try:
                info["kernels_per_token"] = kernels_per_token(self.loaded.model, self.ids, self.kwargs)
            except Exception as exc:  # the profiler is a nice-to-have
                info["kernels_per_token_error"] = f"{type(exc).__name__}: {exc}"
        return info

    def run(self) -> dict[str, Any]:
        return self._timed()


class CompiledRunner:
    def __init__(self, smoke: bool, tokens: int, mode: str) -> None:
        # Chapter 6's engine with its decode step compiled by torch.compile (inductor's fusion, and
        # in max-autotune its GEMM autotuning) and then captured in chapter 6's graph, as ours are.
        self.engine = CudaGraphEngine(load(smoke), min_cache_len=16 if smoke else 256, compile_mode=mode)
        self.params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)

    def warm(self) -> dict[str, Any]:
        first = decode_run(self.engine, self.params)  # compiles every bucket the request crosses
        step = max(self.engine._steps.items())[1]
        info = {"output_ids": first["output_ids"], "implementation": self.engine.implementation}
        info["step_profile"] = summarize_profile(profile_steps(step.forward, str(self.engine.device), steps=3))
        return info

    def run(self) -> dict[str, Any]:
        return decode_run(self.engine, self.params)


def child_main(args: argparse.Namespace) -> None:
    """A baseline process: build and warm up, say `ready`, then serve `run N` until `quit`."""

    def say(obj: dict[str, Any]) -> None:
        print(TAG + json.dumps(obj, default=str), flush=True)

    t0 = time.monotonic()
    try:
        runner = (HFRunner(args.smoke, args.tokens) if args.child == "hf"
                  else CompiledRunner(args.smoke, args.tokens, args.child.removeprefix("compile:")))
        info = runner.warm()
        say({"ready": True, "warmup_s": round(time.monotonic() - t0, 1), **info})
    except Exception as exc:
        say({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]})
        return
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "run":
            break
        try:
            say({"runs": [runner.run() for _ in range(int(words[1]))]})
        except Exception as exc:
            say({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]})


class Baseline:
    """The parent's handle on a baseline process: start, wait until ready, give it turns, stop."""

    def __init__(self, kind: str, args: argparse.Namespace) -> None:
        self.kind = kind
        self.log = tempfile.TemporaryFile(mode="w+")
        argv = [sys.executable, "-m", "chapters.ch07_triton.gpu_engines", "--child", kind,
                "--tokens", str(args.tokens)] + (["--smoke"] if args.smoke else [])
        self.started = time.monotonic()
        # Its own process group, so that stopping it also stops the compile workers it forked.
        # PYTHONPATH: the repository need not be pip-installed on the GPU machine.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True)
        self.buffer = b""
        self.record: dict[str, Any] = {"runs": []}
        self.ready = False

    def _read(self, deadline: float) -> dict[str, Any] | None:
        """The next protocol line, or None at the deadline or if the process ended. Reads the pipe
        itself (not a buffered file), so select() never misses a line already read into a buffer."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.startswith(TAG.encode()):
                    return json.loads(line[len(TAG):])
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None  # the process exited
            self.buffer += chunk

    def wait_ready(self, deadline: float) -> None:
        msg = self._read(deadline)
        if msg and msg.get("ready"):
            self.ready = True
            self.record.update({k: v for k, v in msg.items() if k != "ready"})
        else:
            self.fail(msg, f"not ready after {time.monotonic() - self.started:.0f} s (compilation included)")

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def turn(self, runs: int, timeout_s: float) -> None:
        if not self.ready:
            return
        self._send(f"run {runs}")
        msg = self._read(time.monotonic() + timeout_s)
        if msg and "runs" in msg:
            self.record["runs"] += msg["runs"]
        else:
            self.fail(msg, f"no answer to a turn within {timeout_s:.0f} s")

    def fail(self, msg: dict[str, Any] | None, otherwise: str) -> None:
        self.ready = False
        self.record["error"] = (msg or {}).get("error", otherwise)
        if msg and "traceback" in msg:
            self.record["traceback"] = msg["traceback"]
        self.stop(kill=True)
        self.log.seek(0)
        self.record["stderr_tail"] = self.log.read()[-2000:]

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is not None:
            return
        if not kill:
            try:
                self._send("quit")
                self.proc.wait(timeout=10)
                return
            except (OSError, subprocess.TimeoutExpired):
                pass
        os.killpg(self.proc.pid, signal.SIGKILL)  # the group this script started for this child
        self.proc.wait()


# ---- the parts -------------------------------------------------------------------------------


def compare_tokens(ref: tuple[list[int], torch.Tensor], other: tuple[list[int], torch.Tensor]) -> dict[str, Any]:
    """Same tokens? If not: where they part, and how close each engine's choice was there (its
    logit of its own token minus its logit of the other engine's token, >= 0). Logits are
    comparable only while the tokens so far are the same: the largest difference is taken there.
    Not chapter 6's token_check.compare, which also counts the first differing step's logits: the
    book quotes this one as the largest difference *before* the first different token."""
    (a_ids, a_log), (b_ids, b_log) = ref, other
    first = first_difference(a_ids, b_ids)
    same_prefix = len(a_ids) if first is None else first
    out: dict[str, Any] = {"identical": first is None, "first_difference_at": first, "tokens": len(a_ids)}
    if same_prefix:
        diff = (a_log[:same_prefix] - b_log[:same_prefix]).abs()
        out["max_abs_logit_diff_same_prefix"] = diff.max().item()
        out["max_abs_logit"] = a_log[:same_prefix].abs().max().item()
    if first is not None and first < min(len(a_ids), len(b_ids)):
        x, y = a_ids[first], b_ids[first]
        out.update(ref_token=x, other_token=y,
                   ref_logit_gap=(a_log[first, x] - a_log[first, y]).item(),
                   other_logit_gap=(b_log[first, y] - b_log[first, x]).item())
    return out


def part_tokens(doc: dict[str, Any], engines: dict[str, Any], tokens: int, extra_tokens: int) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    recorded = {name: record_logits(e, config.PROMPT, params) for name, e in engines.items()}
    ch06, ch07 = recorded["ch06_cuda_graph"], recorded["ch07_triton"]
    out: dict[str, Any] = {
        "prompt": config.PROMPT, "tokens": tokens,
        "ch07_vs_ch06": compare_tokens(ch06, ch07),
        "ch08_vs_ch07": compare_tokens(ch07, recorded["ch08_flash_attention"]),
        "ch08_vs_ch06": compare_tokens(ch06, recorded["ch08_flash_attention"]),
        "output_ids": {name: ids for name, (ids, _) in recorded.items()},
    }
    short = SamplingParams(temperature=0.0, max_tokens=extra_tokens, ignore_eos=True)
    out["extra_prompts"] = []
    for prompt in EXTRA_PROMPTS:
        rec = {name: record_logits(e, prompt, short) for name, e in engines.items()}
        out["extra_prompts"].append({
            "prompt": prompt, "tokens": extra_tokens,
            "ch07_vs_ch06": compare_tokens(rec["ch06_cuda_graph"], rec["ch07_triton"]),
            "ch08_vs_ch07": compare_tokens(rec["ch07_triton"], rec["ch08_flash_attention"])})
    doc["tokens"] = out


def summarize_profile(p: dict[str, Any]) -> dict[str, Any]:
    keep = ("wall_per_step_s", "aten_ops_per_step", "kernels_per_step", "gpu_kernel_s_per_step",
            "gpu_busy_s_per_step", "top_kernels")
    return {k: v for k, v in p.items() if k in keep}


def part_kernels(doc: dict[str, Any], engines: dict[str, Any]) -> None:
    """One decode step of chapter 6 and of chapter 7 run eagerly under the profiler: what their
    graphs record. (Chapter 8's decode step is chapter 7's.)"""
    out = {}
    for name in ("ch06_cuda_graph", "ch07_triton"):
        engine = engines[name]
        step = max(engine._steps.items())[1]  # the bucket the last request ended in
        out[name] = summarize_profile(profile_steps(step.forward, str(engine.device), steps=5))
    doc["kernels_per_step"] = out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def part_speed(doc: dict[str, Any], engines: dict[str, Any], baselines: list[Baseline], tokens: int,
               rounds: int, child_runs: int, child_timeout_s: float) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    names = list(engines)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            runs[name].append({k: v for k, v in decode_run(engines[name], params).items() if k != "output_ids"})
        live = [b for b in baselines if b.ready]
        if live:
            live[r % len(live)].turn(child_runs, child_timeout_s)
    out: dict[str, Any] = {"tokens": tokens, "rounds": rounds, "engines": {}}
    for name in names:
        out["engines"][name] = {"decode_tok_s": spread([x["decode_tok_s"] for x in runs[name]]),
                                "ttft_ms": spread([x["ttft_ms"] for x in runs[name]]),
                                "implementation": engines[name].implementation, "runs": runs[name]}
    # Paired ratios: chapter 7 and chapter 6 (and 8 and 7) ran in the same round.
    tok = {n: [x["decode_tok_s"] for x in runs[n]] for n in names}
    out["ch07_over_ch06_per_round"] = spread([a / b for a, b in zip(tok["ch07_triton"], tok["ch06_cuda_graph"])])
    out["ch08_over_ch07_per_round"] = spread([a / b for a, b in zip(tok["ch08_flash_attention"], tok["ch07_triton"])])
    ch07 = out["engines"]["ch07_triton"]["decode_tok_s"]["median"]
    out["baselines"] = {}
    for b in baselines:
        rec = dict(b.record)
        ref_ids = doc.get("tokens", {}).get("output_ids", {}).get("ch06_cuda_graph")
        if rec.get("output_ids") is not None and ref_ids is not None:
            rec["first_difference_vs_ch06"] = first_difference(ref_ids, rec["output_ids"])
        done = [x for x in rec.get("runs", []) if x.get("decode_tok_s")]
        rec["runs"] = [{k: v for k, v in x.items() if k != "output_ids"} for x in done]
        if done:
            rec["decode_tok_s"] = spread([x["decode_tok_s"] for x in done])
            rec["ch07_over_this"] = ch07 / rec["decode_tok_s"]["median"]
        out["baselines"][b.kind] = rec
    hf = out["baselines"].get("hf", {})
    if "ch07_over_this" in hf:
        out["ch07_over_hf_static_compile"] = hf["ch07_over_this"]
        out["target_3x_met"] = hf["ch07_over_this"] >= 3.0
    doc["speed"] = out


def part_prefill(doc: dict[str, Any], engines: dict[str, Any], lengths: list[int], reps: int,
                 deadline: float) -> None:
    """Chapter 7's prefill (chapter 6's PyTorch attention over the whole bucket) against chapter 8's
    (flash kernel), on uncaptured steps, alternating."""
    ch07, ch08 = engines["ch07_triton"], engines["ch08_flash_attention"]
    device = ch07.device
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    vocab = ch07.model.config.vocab_size
    rows = []
    for n in lengths:
        if time.monotonic() > deadline:
            rows.append({"prompt_tokens": n, "skipped": "time budget spent"})
            continue
        ids = torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        size = bucket(n + 1, ch07.min_cache_len)
        row: dict[str, Any] = {"prompt_tokens": n, "cache_slots": size}
        try:
            steps = {"ch07_triton": ch07.new_step(size, capture=False),
                     "ch08_flash_attention": ch08.new_step(size, capture=False)}
            times: dict[str, list[float]] = {k: [] for k in steps}
            logits: dict[str, torch.Tensor] = {}
            with torch.inference_mode():
                for name, step in steps.items():  # warm-up (the flash autotuner sees a new length)
                    logits[name] = step.prefill(ids).float()
                for r in range(reps):
                    for name in list(steps)[r % 2:] + list(steps)[:r % 2]:
                        sync()
                        t0 = time.perf_counter()
                        steps[name].prefill(ids)
                        sync()
                        times[name].append(time.perf_counter() - t0)
                for name, step in steps.items():
                    if cuda:
                        sync()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        step.prefill(ids)
                        sync()
                        row[f"{name}_peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
            for name in steps:
                row[f"{name}_ms"] = spread([t * 1000 for t in times[name]])
            row["ch07_over_ch08_time"] = row["ch07_triton_ms"]["median"] / row["ch08_flash_attention_ms"]["median"]
            a, b = logits["ch07_triton"], logits["ch08_flash_attention"]
            row["same_first_token"] = int(a.argmax()) == int(b.argmax())
            row["max_abs_logit_diff"] = (a - b).abs().max().item()
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
        steps = {}  # free this length's caches before the next
        if cuda:
            torch.cuda.empty_cache()
    doc["prefill"] = rows


# ---- the run ---------------------------------------------------------------------------------


def final_table(doc: dict[str, Any]) -> str:
    lines = ["", f"=== chapters 6-8 engines on {doc['device_name']} ==="]
    t = doc.get("tokens")
    if t:
        for key in ("ch07_vs_ch06", "ch08_vs_ch07"):
            c = t[key]
            note = "identical" if c["identical"] else (
                f"first difference at {c['first_difference_at']}, logit gaps "
                f"{c.get('ref_logit_gap', float('nan')):.3f} / {c.get('other_logit_gap', float('nan')):.3f}")
            lines.append(f"tokens {key} ({c['tokens']} tokens): {note}; max |dlogit| before: "
                         f"{c.get('max_abs_logit_diff_same_prefix', float('nan')):.3g}")
    for name, p in doc.get("kernels_per_step", {}).items():
        k = p.get("kernels_per_step")
        gpu = p.get("gpu_kernel_s_per_step")
        lines.append(f"{name:<22} {k if k is None else round(k)} kernels/step, "
                     f"{'n/a' if gpu is None else f'{gpu * 1e6:.0f} us'} kernel time/step, "
                     f"{p['aten_ops_per_step']:.0f} aten ops/step")
    s = doc.get("speed")
    for kind, b in (s or {}).get("baselines", {}).items():
        k = b.get("kernels_per_token", b.get("step_profile", {}).get("kernels_per_step"))
        if k is not None:
            lines.append(f"{kind:<22} {k:.0f} kernels/{'token (profiled generate)' if 'kernels_per_token' in b else 'step'}")
    if s:
        lines.append(f"{'engine':<34}{'decode tok/s (median, min-max)':>34}")
        for name, e in s["engines"].items():
            d = e["decode_tok_s"]
            lines.append(f"{name:<34}{d['median']:>14.1f}  ({d['min']:.1f}-{d['max']:.1f})")
        for kind, b in s["baselines"].items():
            if "decode_tok_s" in b:
                d = b["decode_tok_s"]
                lines.append(f"{kind:<34}{d['median']:>14.1f}  ({d['min']:.1f}-{d['max']:.1f})")
            else:
                lines.append(f"{kind:<34}  FAILED: {str(b.get('error'))[:60]}")
        r = s["ch07_over_ch06_per_round"]
        lines.append(f"ch07 / ch06 per round: {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})")
        if "ch07_over_hf_static_compile" in s:
            lines.append(f"ch07 / HF static+compile: {s['ch07_over_hf_static_compile']:.2f}x (target >= 3x: "
                         f"{'met' if s['target_3x_met'] else 'NOT met'})")
    for row in doc.get("prefill", []):
        if "ch07_triton_ms" in row:
            lines.append(f"prefill {row['prompt_tokens']:>5} tokens: ch07 {row['ch07_triton_ms']['median']:8.2f} ms, "
                         f"ch08 {row['ch08_flash_attention_ms']['median']:8.2f} ms "
                         f"({row['ch07_over_ch08_time']:.2f}x), same first token: {row['same_first_token']}")
        else:
            lines.append(f"prefill {row['prompt_tokens']:>5} tokens: {row.get('error') or row.get('skipped')}")
    for part, err in doc.get("errors", {}).items():
        lines.append(f"{part} FAILED: {err.strip().splitlines()[-1]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny model, interpreter, few tokens (any machine)")
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per request (default 256; smoke 4)")
    parser.add_argument("--rounds", type=int, default=None, help="speed rounds (default 6; smoke 2)")
    parser.add_argument("--compile-modes", nargs="*", default=None,
                        help="torch.compile modes for chapter 6's step (default: default "
                             "max-autotune-no-cudagraphs; smoke: default)")
    parser.add_argument("--no-hf", action="store_true", help="skip HF generate static+compile")
    parser.add_argument("--prefill-lengths", type=int, nargs="*", default=None,
                        help="default 512 1024 2048 4096 8191 (8191 + 1 generated = the 8,192 context)")
    parser.add_argument("--prefill-reps", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=280.0,
                        help="wall-clock budget: baselines not ready in time are killed, prefill lengths skipped")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    smoke = args.smoke
    args.tokens = args.tokens or (4 if smoke else 256)
    if args.child:
        child_main(args)
        return 0
    t0 = time.monotonic()
    cuda = torch.cuda.is_available()
    if not cuda and not smoke:
        parser.error("this script measures a GPU; on a CPU run it with --smoke")
    rounds = args.rounds or (2 if smoke else 6)
    modes = args.compile_modes if args.compile_modes is not None else (
        ["default"] if smoke else ["default", "max-autotune-no-cudagraphs"])
    lengths = args.prefill_lengths or ([8, 24] if smoke else [512, 1024, 2048, 4096, 8191])
    started = provenance("smoke test: tiny random model, Triton interpreter" if smoke else "")
    log = lambda line: print(line, flush=True)  # noqa: E731

    loaded = load(smoke)
    name = "ch07_engines_smoke" if smoke else "ch07_engines"
    doc: dict[str, Any] = {"device_name": torch.cuda.get_device_name(0) if cuda else "CPU (smoke)",
                           "smoke": smoke, "interpreter": INTERPRET, "errors": {}, "part_seconds": {}}
    model_info = {"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256}

    def save() -> Path:
        doc["total_seconds"] = round(time.monotonic() - t0, 1)
        return save_results(name, doc, device="cuda" if cuda else "cpu", model=model_info, started=started)

    kw: dict[str, Any] = {"min_cache_len": 16, "kernels": True} if smoke else {}
    engines: dict[str, Any] = {}
    baselines: list[Baseline] = []

    def warm() -> None:
        engines["ch06_cuda_graph"] = CudaGraphEngine(loaded, min_cache_len=kw.get("min_cache_len", 256))
        engines["ch07_triton"] = TritonEngine(loaded, **kw)
        engines["ch08_flash_attention"] = FlashAttentionEngine(loaded, **kw)
        params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
        doc["warmup_s"] = {}
        for n, e in engines.items():
            w0 = time.monotonic()
            decode_run(e, params)  # captures the graphs of every bucket the request crosses
            doc["warmup_s"][n] = round(time.monotonic() - w0, 1)
        doc["implementations"] = {n: e.implementation for n, e in engines.items()}
        # The baselines compile while this process checks tokens and counts kernels (untimed work).
        kinds = ([] if args.no_hf else ["hf"]) + [f"compile:{m}" for m in modes]
        baselines.extend(Baseline(kind, args) for kind in kinds)

    def wait_for_baselines() -> None:
        reserve = 30.0 + 10.0 * len(lengths)  # what the speed and prefill parts need afterwards
        for b in baselines:
            b.wait_ready(max(t0 + args.budget_s - reserve, time.monotonic() + 1))
            log(f"baseline {b.kind}: {'ready' if b.ready else b.record.get('error')}")
        doc["baselines_ready"] = {b.kind: {"ready": b.ready, "warmup_s": b.record.get("warmup_s"),
                                           "error": b.record.get("error")} for b in baselines}

    parts: list[tuple[str, Callable[[], None]]] = [
        ("warmup", warm),
        ("tokens", lambda: part_tokens(doc, engines, args.tokens, 2 if smoke else 64)),
        ("kernels", lambda: part_kernels(doc, engines)),
        ("baselines", wait_for_baselines),
        ("speed", lambda: part_speed(doc, engines, baselines, args.tokens, rounds, 2,
                                     60.0 if smoke else 30.0)),
        ("prefill", lambda: part_prefill(doc, engines, lengths, args.prefill_reps, t0 + args.budget_s)),
    ]
    try:
        for part, fn in parts:
            p0 = time.monotonic()
            try:
                fn()
            except Exception:
                doc["errors"][part] = traceback.format_exc()[-3000:]
                log(f"{part} failed:\n{doc['errors'][part]}")
                if part == "warmup":
                    break
            doc["part_seconds"][part] = round(time.monotonic() - p0, 1)
            log(f"{part}: {doc['part_seconds'][part]} s")
            save()
    finally:
        for b in baselines:
            b.stop()
    path = save()
    log(f"wrote {path}")
    log(final_table(doc))
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the baselines fork after tokenizing
    sys.exit(main())
