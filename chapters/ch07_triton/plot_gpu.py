"""Plot chapter 7's GPU results: GEMM TFLOP/s (Triton vs cuBLAS) by shape, RMSNorm GB/s against the
measured copy bandwidth. Reads results/gpu/ch07_kernels.json (or the path given), writes a PNG next to it.

    python chapters/ch07_triton/plot_gpu.py [results/gpu/ch07_kernels.json]
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
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results" / "gpu" / "ch07_kernels.json"
    data = json.loads(path.read_text())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))

    gemm = data["gemm"]
    labels = [f"{r['M']}x{r['N']}x{r['K']}" for r in gemm]
    x = range(len(gemm))
    ax1.bar([i - 0.2 for i in x], [r["triton_tflops"] for r in gemm], width=0.4, label="Triton")
    ax1.bar([i + 0.2 for i in x], [r["torch_tflops"] for r in gemm], width=0.4, label="cuBLAS (torch.matmul)")
    ax1.axhline(data["ceilings"]["cublas_tflops"], color="gray", ls="--",
                label=f"cuBLAS {data['ceilings']['cublas_gemm_size']}^3")
    ax1.set_yscale("log")
    ax1.set_xticks(list(x), labels, rotation=60, ha="right", fontsize=7)
    ax1.set_ylabel("TFLOP/s (bf16, log scale)")
    ax1.set_title("GEMM, M x N x K")
    ax1.legend(fontsize=8)

    norms = [r for r in data["rmsnorm"]]
    labels = [f"{r['rows']}x{r['cols']}{' +res' if r['residual'] else ''}" for r in norms]
    x = range(len(norms))
    ax2.bar([i - 0.2 for i in x], [r["triton_gbps"] for r in norms], width=0.4, label="Triton fused")
    ax2.bar([i + 0.2 for i in x], [r["torch_gbps"] for r in norms], width=0.4, label="torch eager")
    ax2.axhline(data["ceilings"]["bandwidth_gbps"], color="gray", ls="--", label="measured copy bandwidth")
    ax2.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("GB/s (log scale)")
    ax2.set_title("RMSNorm (bytes read + written)")
    ax2.legend(fontsize=8)

    fig.suptitle(f"Chapter 7 kernels on {data.get('device', {}).get('device', '?')}")
    fig.tight_layout()
    out = path.with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    # The tables the book includes (book/src/ch07/gpu.md), from the same JSON.
    md = path.with_suffix(".md")
    md.write_text("\n".join([
        markdown_table([{"what": "copy bandwidth (GB/s)", "value": data["ceilings"]["bandwidth_gbps"]},
                        {"what": f"cuBLAS bf16 {data['ceilings']['cublas_gemm_size']}^3 (TFLOP/s)",
                         "value": data["ceilings"]["cublas_tflops"]}], ["what", "value"]),
        markdown_table(data["gemm"], ["M", "N", "K", "triton_tflops", "torch_tflops", "triton_vs_torch",
                                      "triton_gbps", "triton_bw_fraction", "rel_err", "ok"]),
        markdown_table(data["rmsnorm"], ["rows", "cols", "residual", "triton_gbps", "torch_gbps",
                                         "triton_bw_fraction", "rel_err", "ok"]),
        markdown_table(data["swiglu"], ["op", "M", "triton_ms", "triton_unfused_ms", "torch_ms", "triton_gbps",
                                        "rel_err", "ok"]),
    ]))
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
