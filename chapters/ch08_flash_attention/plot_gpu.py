"""Plot chapter 8's GPU results: time and peak memory against length for naive, block-wise, Triton
flash and SDPA. Reads results/gpu/ch08_flash.json (or the path given), writes a PNG next to it.

    python chapters/ch08_flash_attention/plot_gpu.py [results/gpu/ch08_flash.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from chapters.ch07_triton.bench import markdown_table  # noqa: E402

from shared.benchmark.provenance import REPO_ROOT as REPO  # noqa: E402


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results" / "gpu" / "ch08_flash.json"
    data = json.loads(path.read_text())
    rows = data["rows"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        ts = [r["T"] for r in mine]
        ax1.plot(ts, [r["ms"] for r in mine], marker="o", label=m)
        if mine[0]["peak_extra_bytes"] is not None:
            ax2.plot(ts, [r["peak_extra_bytes"] / 2**20 for r in mine], marker="o", label=m)
    naive = [r for r in rows if r["method"] == "naive"]
    ax2.plot([r["T"] for r in naive], [r["formula_bytes"] / 2**20 for r in naive], "k--", label="naive formula 8·H·T²")
    for ax, ylabel in ((ax1, "time per call (ms)"), (ax2, "peak memory above inputs (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    shape = data["shape"]
    fig.suptitle(f"Causal attention, {shape['Hq']} query / {shape['Hkv']} KV heads, D={shape['D']}, {shape['dtype']}, "
                 f"on {data.get('device', {}).get('device', '?')}")
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    md = path.with_suffix(".md")  # the table the book includes (book/src/ch08/gpu.md)
    md.write_text(markdown_table(data["by_length"], ["T", "triton_ms", "best_sdpa_ms", "triton_over_sdpa", "triton_tflops",
                                                     "naive_ms", "blockwise_ms", "naive_MiB", "formula_MiB",
                                                     "triton_MiB", "all_ok"]))
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
