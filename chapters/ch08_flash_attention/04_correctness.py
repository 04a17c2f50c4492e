"""Block-wise attention and the flash kernel against naive float64 attention over lengths that are
not multiples of the block, GQA groups, causal and not, both dtypes; saved as
results/cpu/ch08_correctness.json (results/gpu or $OUT on a GPU) for the book to quote.

    python chapters/ch08_flash_attention/04_correctness.py
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import time

import torch

from chapters.ch07_triton.bench import markdown_table, table
from chapters.ch07_triton.check import passes, poisoned, rel_err, tolerance
from chapters.ch08_flash_attention.attention import blockwise_attention, naive_attention
from chapters.ch08_flash_attention.flash import flash_attention
from shared.benchmark.provenance import save_results

# (heads, kv heads, Tq, Tk, causal)
CASES = [(9, 3, 1, 1, True), (9, 3, 17, 17, True), (9, 3, 100, 100, True), (3, 1, 130, 130, True),
         (9, 3, 7, 47, True), (4, 4, 33, 33, True), (4, 2, 30, 45, False)]


def main() -> None:
    torch.manual_seed(0)
    rows = []
    for hq, hkv, tq, tk, causal in CASES:
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(1, hq, tq, 64, device=KERNEL_DEVICE).to(dtype)
            k, v = (torch.randn(1, hkv, tk, 64, device=KERNEL_DEVICE).to(dtype) for _ in range(2))
            ref = naive_attention(q.double(), k.double(), v.double(), causal)
            start = time.perf_counter()
            out = flash_attention(q, k, v, causal, out=poisoned(tuple(q.shape), dtype, KERNEL_DEVICE))
            seconds = time.perf_counter() - start
            err = rel_err(out, ref)
            rows.append({"heads": f"{hq}/{hkv}", "Tq": tq, "Tk": tk, "causal": causal,
                         "dtype": str(dtype).split(".")[-1], "flash_rel_err": err,
                         "blockwise_rel_err": rel_err(blockwise_attention(q, k, v, causal, block=32), ref),
                         "tolerance": tolerance(dtype, uses_dot=True), "ok": passes(err, dtype, uses_dot=True),
                         "flash_seconds": round(seconds, 3)})
    columns = ["heads", "Tq", "Tk", "causal", "dtype", "flash_rel_err", "blockwise_rel_err", "tolerance", "ok",
               "flash_seconds"]
    print(table(rows, columns))
    body = {"interpreter": INTERPRET, "reference": "naive attention in float64 on the same (rounded) inputs",
            "metric": "||out - ref|| / ||ref||, flash output NaN-poisoned before each run", "seed": 0,
            "rows": rows, "all_ok": all(r["ok"] for r in rows)}
    path = save_results("ch08_correctness", body, device=KERNEL_DEVICE)
    path.with_suffix(".md").write_text(markdown_table(rows, columns))  # the book includes this table
    print(f"all ok: {body['all_ok']}; wrote {path}")


if __name__ == "__main__":
    main()
