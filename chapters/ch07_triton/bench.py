"""Timing, provenance and output for the chapter 7 and 8 GPU benchmarks.

On a GPU every time is the median of triton.testing.do_bench, which flushes the L2 cache (writes a
256 MB buffer) before each timed call: every call reads its inputs from HBM, so small operands that
would fit in L2 are not flattered. On a CPU (`--smoke`, through the interpreter) times are wall
clock and mean nothing; smoke runs only prove the script works end to end.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from chapters.ch07_triton.interpret import INTERPRET  # sets TRITON_INTERPRET first

import torch
import triton

from shared.benchmark.provenance import provenance, results_dir, write_json
from shared.benchmark.report import format_table


def bench_ms(fn: Callable[[], Any]) -> float:
    """Median milliseconds per call of fn."""
    if not INTERPRET:
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def device_info() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"device": "cpu (Triton interpreter)", "interpreter": True}
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1),
            "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1), "interpreter": False}


def write_results(name: str, body: dict[str, Any], smoke: bool) -> Path:
    """$OUT/<name>.json, else results/gpu/<name>.json; smoke runs go to a temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="ifs-smoke-")) if smoke else results_dir("cuda")
    data = {"name": name, "provenance": provenance(), "device": device_info(), **body}
    return write_json(data, folder / f"{name}.json")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return "" if v is None else str(v)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A plain fixed-width table of the given columns of each row."""
    return format_table(columns, [[_cell(r.get(c)) for c in columns] for r in rows])


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """The same table as `table`, in Markdown, for the book to {{#include}}."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"
