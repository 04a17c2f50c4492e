"""Measure this machine's ceilings: memory bandwidth, matmul throughput, the ridge point between
them, and the cost of one tiny op. Writes results/cpu/ch06_ceilings.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/00_ceilings.py [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import argparse

import os

import torch

from chapters.ch06_profiling import ceilings, roofline
from chapters.ch06_profiling.report import write_json
from shared.config import DEVICE


def threads_experiment(threads: int) -> dict[str, dict[str, float]]:
    """Two decode-step ops (attention over 256 cached tokens, the q projection) timed with 1 thread
    and with every core, under whatever else the machine is running right now."""
    fns = roofline.op_callables(roofline.ModelShape(), 1, 1, 256, "cpu", torch.float32,
                                cold_bytes=128 << 20)
    out: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        for n in sorted({1, os.cpu_count() or 1}):
            torch.set_num_threads(n)
            out[f"{n}_threads"] = {name: roofline.measure_calls(fns[name], "cpu")
                                   for name in ("attention", "q_proj")}
    torch.set_num_threads(threads)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (default 1: the cores are shared; see ceilings.pin_threads)")
    args = parser.parse_args()
    ceilings.pin_threads(args.device, args.threads)
    result = ceilings.measure(args.device)
    if args.device == "cpu":
        result["threads_experiment_s"] = threads_experiment(args.threads)
    path = write_json("ch06_ceilings.json", result, args.device)
    print(f"wrote {path}")
    print(ceilings.table(result))
    for threads, ops in result.get("threads_experiment_s", {}).items():
        print(f"  {threads}: " + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in ops.items()))


if __name__ == "__main__":
    main()
