"""Chapter 8 on the GPU, in one call: causal grouped-query attention (9 query heads over 3 KV
heads, head_dim 64, bf16, batch 1) at lengths 512 to 16,384, four ways: naive (the whole score
matrix), block-wise PyTorch, the Triton flash kernel, and PyTorch's SDPA. For each: time (do_bench
median), peak memory above the inputs (includes the output), and the error against SDPA.

    python chapters/ch08_flash_attention/gpu_benchmark.py            # on the H200; JSON to $OUT or results/gpu/
    python chapters/ch08_flash_attention/gpu_benchmark.py --smoke    # anywhere: tiny sizes, interpreter

Writes ch08_flash.json and prints a short table last. Plot: chapters/ch08_flash_attention/plot_gpu.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # sets TRITON_INTERPRET first

import torch
import torch.nn.functional as F

from chapters.ch07_triton.bench import bench_ms, table, write_results
from chapters.ch07_triton.check import passes, rel_err
from chapters.ch08_flash_attention.attention import blockwise_attention, naive_attention, naive_peak_bytes
from chapters.ch08_flash_attention.flash import flash_attention, flash_fwd_kernel

DEV = KERNEL_DEVICE
HQ, HKV, D = 9, 3, 64  # SmolLM2-135M's attention


def peak_extra_bytes(fn: Callable[[], torch.Tensor]) -> tuple[int | None, torch.Tensor]:
    """Peak allocated bytes while fn runs, above what was allocated before (None on a CPU)."""
    if INTERPRET:
        return None, fn()
    # Warm up first: an autotuned kernel's first call benchmarks its configs with do_bench, which
    # allocates a 256 MB cache-flushing buffer; that is tuning, not the kernel's memory.
    fn()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, out


def measure(t: int, block: int) -> list[dict]:
    g = torch.Generator(device=DEV).manual_seed(t)
    q = torch.randn(1, HQ, t, D, device=DEV, generator=g).to(torch.bfloat16)
    k = torch.randn(1, HKV, t, D, device=DEV, generator=g).to(torch.bfloat16)
    v = torch.randn(1, HKV, t, D, device=DEV, generator=g).to(torch.bfloat16)
    k_rep, v_rep = k.repeat_interleave(HQ // HKV, 1), v.repeat_interleave(HQ // HKV, 1)
    methods: dict[str, Callable[[], torch.Tensor]] = {
        "sdpa_gqa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        # K/V repeated outside the timed call: the layout SDPA's fastest kernels were written for.
        "sdpa_repeated_kv": lambda: F.scaled_dot_product_attention(q, k_rep, v_rep, is_causal=True),
        "triton_flash": lambda: flash_attention(q, k, v, causal=True),
        "blockwise_torch": lambda: blockwise_attention(q, k, v, causal=True, block=block),
        "naive": lambda: naive_attention(q, k, v, causal=True),
    }
    ref = None
    rows = []
    flop = 4 * HQ * t * t * D / 2  # two matmuls over the causal half of the score matrix
    for name, fn in methods.items():
        peak, out = peak_extra_bytes(fn)
        if ref is None:
            ref = out.double()  # SDPA with GQA is the reference
        err = rel_err(out, ref)
        del out
        ms = bench_ms(fn)
        row = {"T": t, "method": name, "ms": ms, "tflops": flop / ms / 1e9, "peak_extra_bytes": peak,
               "rel_err_vs_sdpa": err, "ok": passes(err, torch.bfloat16, uses_dot=True)}
        if name == "naive":
            row["formula_bytes"] = naive_peak_bytes(1, HQ, t, t)
        if name == "triton_flash":
            row["config"] = str(getattr(flash_fwd_kernel, "best_config", ""))
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (for a CPU check of the script)")
    args = parser.parse_args()
    if not args.smoke and INTERPRET:
        sys.exit("no GPU: run with --smoke to check the script through the Triton interpreter")
    lengths = [40, 100] if args.smoke else [512, 1024, 2048, 4096, 8192, 16384]
    block = 32 if args.smoke else 1024
    rows: list[dict] = []
    for t in lengths:
        rows += measure(t, block)
        print(f"T={t} done", flush=True)

    def pick(t: int, name: str) -> dict:
        return next(r for r in rows if r["T"] == t and r["method"] == name)

    # Speed and memory summary at each length: Triton against the faster of the two SDPA calls.
    summary_rows = []
    for t in lengths:
        best_sdpa = min(pick(t, "sdpa_gqa")["ms"], pick(t, "sdpa_repeated_kv")["ms"])
        tri, naive = pick(t, "triton_flash"), pick(t, "naive")
        mib = lambda b: None if b is None else b / 2**20  # noqa: E731
        summary_rows.append({"T": t, "triton_ms": tri["ms"], "best_sdpa_ms": best_sdpa,
                             "triton_over_sdpa": tri["ms"] / best_sdpa, "triton_tflops": tri["tflops"],
                             "naive_ms": naive["ms"], "blockwise_ms": pick(t, "blockwise_torch")["ms"],
                             "naive_MiB": mib(naive["peak_extra_bytes"]), "formula_MiB": mib(naive["formula_bytes"]),
                             "triton_MiB": mib(tri["peak_extra_bytes"]),
                             "all_ok": all(r["ok"] for r in rows if r["T"] == t)})
    at = 40 if args.smoke else 8192
    target = next(r for r in summary_rows if r["T"] == at)
    summary = {"length": at, "triton_over_best_sdpa": target["triton_over_sdpa"],
               "target_met": target["triton_over_sdpa"] <= 1.5, "all_correct": all(r["ok"] for r in rows)}
    path = write_results("ch08_flash", {"smoke": args.smoke, "shape": {"B": 1, "Hq": HQ, "Hkv": HKV, "D": D,
                                                                       "dtype": "bfloat16", "causal": True},
                                        "blockwise_block": block, "rows": rows, "by_length": summary_rows,
                                        "summary": summary}, args.smoke)
    print(f"wrote {path}\n")
    print(table(summary_rows, ["T", "triton_ms", "best_sdpa_ms", "triton_over_sdpa", "naive_ms", "blockwise_ms",
                               "naive_MiB", "formula_MiB", "triton_MiB", "all_ok"]))
    print(f"\nTriton / best SDPA at T={at}: {summary['triton_over_best_sdpa']:.2f} (target <= 1.5); "
          f"every method correct: {summary['all_correct']}")


if __name__ == "__main__":
    main()
