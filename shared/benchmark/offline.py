"""Offline benchmarks: engines called in-process, no HTTP.

`compare_engines` is the one measuring loop. It runs every engine on the same prompts and
parameters, in rotation (A B, then B A, ...), so that a machine that slows down half-way through
(another process starts, the CPU throttles) slows both engines alike, and reports each engine's
tokens per second per run and, per run, the ratio to the first engine. The spread of those ratios
is the honest error bar on a speed-up. `run_offline` is the same loop with one engine.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from shared import config
from shared.benchmark.records import RequestRecord, summarize_records
from shared.contracts import SamplingParams
from shared.engine import BaseOfflineEngine
from shared.stats import summarize


def measure_request(
    engine: BaseOfflineEngine, prompt_ids: list[int], params: SamplingParams, prompt_index: int = 0
) -> RequestRecord:
    """Run one request through the engine's token stream, timing each token as it arrives."""
    record = RequestRecord(prompt_index, input_tokens=len(prompt_ids))
    text: list[str] = []
    start = last = time.perf_counter()
    for event in engine.stream(prompt_ids, params):
        now = time.perf_counter()
        text.append(event.text)
        if event.token_id is not None:
            if record.ttft_ms is None:
                record.ttft_ms = (now - start) * 1000
            else:
                record.itl_ms.append((now - last) * 1000)
            last = now
            record.output_ids.append(event.token_id)
        if event.finish_reason is not None:
            record.finish_reason = event.finish_reason
            record.reported = event.metrics.as_dict() if event.metrics else {}
    record.e2e_ms = (time.perf_counter() - start) * 1000
    record.output_tokens = len(record.output_ids)
    record.text = "".join(text)
    return record


@contextlib.contextmanager
def peak_memory(device: torch.device | str) -> Iterator[dict[str, Any]]:
    """Measures the peak memory of the block. On CUDA: bytes allocated by torch. On Linux CPUs: the
    process's peak resident set (VmHWM, reset before the block), which includes the weights, Python
    and everything else in the process; elsewhere the process's lifetime peak (cannot be reset)."""
    out: dict[str, Any] = {}
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        yield out
        torch.cuda.synchronize()
        out.update(bytes=torch.cuda.max_memory_allocated(), kind="cuda max_memory_allocated")
        return
    status = Path("/proc/self/status")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # "5" resets the peak RSS counter
        resettable = True
    except OSError:
        resettable = False
    yield out
    if resettable and status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                out.update(bytes=int(line.split()[1]) * 1024, kind="process peak RSS (VmHWM)")
                return
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    out.update(bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
               kind="process lifetime peak RSS (ru_maxrss)")


@dataclass
class OfflineResult:
    """One engine's measurements: every request of every run, and per-run totals."""

    label: str
    provenance: dict[str, Any]
    records: list[RequestRecord] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> list[float]:
        """Per run: output tokens counted from the results over the run's wall time."""
        return [r["tokens_per_second"] for r in self.runs]

    def summary(self) -> dict[str, Any]:
        peaks = [r["peak_memory_bytes"] for r in self.runs if r.get("peak_memory_bytes")]
        return {
            **summarize_records(self.records),
            "run_tokens_per_second": summarize(self.tokens_per_second),
            "run_wall_s": summarize([r["wall_s"] for r in self.runs]),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "peak_memory_kind": self.runs[0].get("peak_memory_kind") if self.runs else None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "engine": self.provenance,
            "summary": self.summary(),
            "runs": self.runs,
            "requests": [r.as_dict() for r in self.records],
        }


@dataclass
class Comparison:
    """Several engines measured alternately on one workload; engine 0 is the reference."""

    results: list[OfflineResult]
    workload: dict[str, Any]

    def speedup(self, i: int) -> dict[str, float]:
        """Per-run ratio of engine i's tokens/s to engine 0's in the same round, summarised."""
        ref, other = self.results[0].tokens_per_second, self.results[i].tokens_per_second
        return summarize([b / a for a, b in zip(ref, other) if a > 0])

    def same_tokens(self, i: int) -> bool:
        """Whether engine i produced exactly engine 0's tokens for every request of every run."""
        ref = {(r.run, r.prompt_index): r.output_ids for r in self.results[0].records}
        return all(ref[(r.run, r.prompt_index)] == r.output_ids for r in self.results[i].records)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "engines": [r.as_dict() for r in self.results],
            "comparison": [
                {
                    "label": r.label,
                    "reference": self.results[0].label,
                    "speedup_tokens_per_second": self.speedup(i),
                    "same_tokens_as_reference": self.same_tokens(i),
                }
                for i, r in enumerate(self.results)
            ],
        }


def _labels(engines: Sequence[BaseOfflineEngine], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        if len(labels) != len(engines) or len(set(labels)) != len(labels):
            raise ValueError(f"labels must be {len(engines)} distinct names, got {list(labels)!r}")
        return list(labels)
    out: list[str] = []
    for engine in engines:
        name = getattr(engine, "name", type(engine).__name__)
        out.append(name if name not in out else f"{name}#{len(out) + 1}")
    return out


def _run_workload(
    engine: BaseOfflineEngine, prompts: list[list[int]], params: SamplingParams, bar: Any
) -> tuple[list[RequestRecord], float]:
    records = []
    start = time.perf_counter()
    for i, prompt_ids in enumerate(prompts):
        records.append(measure_request(engine, prompt_ids, params, i))
        bar.update(1)
    return records, time.perf_counter() - start


def compare_engines(
    engines: Sequence[BaseOfflineEngine],
    prompts: Sequence[str | list[int]],
    params: SamplingParams,
    runs: int = config.BENCHMARK_RUNS,
    warmup: int = config.WARMUP_RUNS,
    labels: Sequence[str] | None = None,
    progress: bool = True,
) -> Comparison:
    """Run each engine `warmup` times (discarded), then `runs` rounds in which every engine runs the
    whole workload once, the order rotating each round. Returns all measurements; engine 0 is the
    reference for speed-ups and for the token check."""
    if not engines:
        raise ValueError("compare_engines needs at least one engine")
    if not prompts:
        raise ValueError("compare_engines needs at least one prompt")
    if runs < 1 or warmup < 0:
        raise ValueError(f"runs must be >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    names = _labels(engines, labels)
    encoded = [[e.encode(p) if isinstance(p, str) else list(p) for p in prompts] for e in engines]
    results = [OfflineResult(name, e.provenance()) for name, e in zip(names, engines)]
    total = (warmup + runs) * len(engines) * len(prompts)
    with tqdm(total=total, desc="offline benchmark", unit="req", disable=not progress, leave=False) as bar:
        for i, engine in enumerate(engines):
            for _ in range(warmup):
                bar.set_postfix_str(f"warm-up {names[i]}")
                _run_workload(engine, encoded[i], params, bar)
        for run in range(runs):
            shift = run % len(engines)  # rotate: A B C, B C A, C A B, ...
            order = list(range(shift, len(engines))) + list(range(shift))
            for position, i in enumerate(order):
                bar.set_postfix_str(f"run {run + 1}/{runs} {names[i]}")
                with peak_memory(engines[i].device) as peak:
                    records, wall = _run_workload(engines[i], encoded[i], params, bar)
                for r in records:
                    r.run = run
                out_tokens = sum(r.output_tokens for r in records)
                results[i].records.extend(records)
                results[i].runs.append({
                    "run": run,
                    "position_in_round": position,
                    "wall_s": wall,
                    "output_tokens": out_tokens,
                    "tokens_per_second": out_tokens / wall if wall > 0 else 0.0,
                    "peak_memory_bytes": peak.get("bytes"),
                    "peak_memory_kind": peak.get("kind"),
                })
    workload = {
        "prompts": [p if isinstance(p, str) else {"token_ids": list(p)} for p in prompts],
        "params": {k: v for k, v in vars(params).items()},
        "runs": runs,
        "warmup": warmup,
        "order": "rotating (round r starts with engine r mod n)",
    }
    return Comparison(results, workload)


def run_offline(
    engine: BaseOfflineEngine,
    prompts: Sequence[str | list[int]],
    params: SamplingParams,
    runs: int = config.BENCHMARK_RUNS,
    warmup: int = config.WARMUP_RUNS,
    progress: bool = True,
) -> OfflineResult:
    """One engine: `compare_engines` with nothing to compare against."""
    return compare_engines([engine], prompts, params, runs, warmup, progress=progress).results[0]
