"""Chapter 7 on the GPU, in one call: the machine's measured ceilings, then each Triton kernel
against them and against PyTorch, with a correctness check on every configuration measured.

    python chapters/ch07_triton/gpu_benchmark.py            # on the H200; JSON to $OUT or results/gpu/
    python chapters/ch07_triton/gpu_benchmark.py --smoke    # anywhere: tiny sizes through the interpreter

Writes ch07_kernels.json (ceilings, gemm, rmsnorm, swiglu rows) and prints a short table last.
Plot it with chapters/ch07_triton/plot_gpu.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # sets TRITON_INTERPRET first

import torch

from chapters.ch07_triton.bench import bench_ms, table, write_results
from chapters.ch07_triton.check import passes, rel_err
from chapters.ch07_triton.matmul import matmul, matmul_kernel
from chapters.ch07_triton.rmsnorm import rmsnorm
from chapters.ch07_triton.swiglu import matmul_swiglu, swiglu

DEV = KERNEL_DEVICE
BF16 = torch.bfloat16


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(BF16)


def ceilings(smoke: bool) -> dict:
    """Device-to-device copy bandwidth (bytes read + written) and cuBLAS bf16 GEMM throughput."""
    n = (1 << 20) if smoke else (1 << 30)  # bytes per buffer: 1 GiB dwarfs the 50 MB L2
    src = torch.empty(n // 2, dtype=BF16, device=DEV).normal_()
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    s = 256 if smoke else 8192
    a, b = rand(s, s), rand(s, s)
    c = torch.empty(s, s, dtype=BF16, device=DEV)
    gemm_ms = bench_ms(lambda: torch.matmul(a, b, out=c))
    del src, dst, a, b, c
    return {"copy_bytes": 2 * n, "copy_ms": copy_ms, "bandwidth_gbps": 2 * n / copy_ms / 1e6,
            "cublas_gemm_size": s, "cublas_gemm_ms": gemm_ms, "cublas_tflops": 2 * s**3 / gemm_ms / 1e9}


def gemm_row(m: int, n: int, k: int, kind: str, bandwidth: float) -> dict:
    a, w = rand(m, k), rand(n, k)  # w is a linear layer's weight [N, K]; both sides use w.t()
    out = torch.empty(m, n, dtype=BF16, device=DEV)
    err = rel_err(matmul(a, w.t(), out=out), a.double() @ w.double().t())
    t_triton = bench_ms(lambda: matmul(a, w.t(), out=out))
    config = str(getattr(matmul_kernel, "best_config", ""))
    t_torch = bench_ms(lambda: torch.matmul(a, w.t(), out=out))
    flop, nbytes = 2 * m * n * k, 2 * (m * k + n * k + m * n)
    return {"kind": kind, "M": m, "N": n, "K": k, "triton_ms": t_triton, "torch_ms": t_torch,
            "triton_tflops": flop / t_triton / 1e9, "torch_tflops": flop / t_torch / 1e9,
            "triton_vs_torch": t_torch / t_triton, "triton_gbps": nbytes / t_triton / 1e6,
            "triton_bw_fraction": nbytes / t_triton / 1e6 / bandwidth,
            "rel_err": err, "ok": passes(err, BF16, uses_dot=True), "config": config}


def rmsnorm_torch_eager(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """What the model does without a fused kernel (HF LlamaRMSNorm): several kernels."""
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rmsnorm_row(rows: int, cols: int, bandwidth: float, residual: bool) -> dict:
    x, w = rand(rows, cols), rand(cols)
    r = rand(rows, cols) if residual else None
    out = torch.empty_like(x)
    ref_in = x.double() + r.double() if residual else x.double()
    ref = ref_in * torch.rsqrt(ref_in.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
    err = rel_err(rmsnorm(x, w, residual=r.clone() if residual else None, out=out), ref)
    # With a residual, each call rewrites r with x + r: values drift but the bytes moved are the same.
    t_triton = bench_ms(lambda: rmsnorm(x, w, residual=r, out=out))
    t_torch = bench_ms(lambda: rmsnorm_torch_eager(x + r if residual else x, w))
    nbytes = 2 * rows * cols * (4 if residual else 2) + 2 * cols  # x (+r) read, y (+r) written, weight
    return {"rows": rows, "cols": cols, "residual": residual, "bytes": nbytes, "triton_ms": t_triton,
            "torch_ms": t_torch, "triton_gbps": nbytes / t_triton / 1e6, "torch_gbps": nbytes / t_torch / 1e6,
            "triton_bw_fraction": nbytes / t_triton / 1e6 / bandwidth, "rel_err": err, "ok": passes(err, BF16)}


def swiglu_rows(m: int, k: int, inter: int, bandwidth: float) -> list[dict]:
    """Elementwise SwiGLU on a [M, 2I] input, and the MLP's first half three ways."""
    gu = rand(m, 2 * inter)
    out = torch.empty(m, inter, dtype=BF16, device=DEV)
    g64, u64 = gu[:, :inter].double(), gu[:, inter:].double()
    err = rel_err(swiglu(gu, out=out), torch.nn.functional.silu(g64) * u64)
    t_el = bench_ms(lambda: swiglu(gu, out=out))
    t_el_torch = bench_ms(lambda: torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:])
    nbytes = 2 * 3 * m * inter
    elementwise = {"op": "swiglu", "M": m, "I": inter, "triton_ms": t_el, "torch_ms": t_el_torch,
                   "triton_gbps": nbytes / t_el / 1e6, "triton_bw_fraction": nbytes / t_el / 1e6 / bandwidth,
                   "rel_err": err, "ok": passes(err, BF16)}

    x, w_gate_up = rand(m, k), rand(2 * inter, k)  # the stacked [W_gate; W_up], as vLLM stores it
    wg, wu = w_gate_up[:inter], w_gate_up[inter:]
    ref = torch.nn.functional.silu(x.double() @ wg.double().t()) * (x.double() @ wu.double().t())
    err_f = rel_err(matmul_swiglu(x, wg.t(), wu.t(), out=out), ref)
    t_fused = bench_ms(lambda: matmul_swiglu(x, wg.t(), wu.t(), out=out))
    t_two = bench_ms(lambda: swiglu(matmul(x, w_gate_up.t())))  # our GEMM, then our elementwise kernel

    def torch_mlp_half() -> torch.Tensor:
        h = x @ w_gate_up.t()
        return torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    t_torch = bench_ms(torch_mlp_half)
    flop = 2 * m * k * 2 * inter
    fused = {"op": "matmul_swiglu", "M": m, "K": k, "I": inter, "triton_ms": t_fused, "triton_unfused_ms": t_two,
             "torch_ms": t_torch, "triton_tflops": flop / t_fused / 1e9, "triton_vs_torch": t_torch / t_fused,
             "rel_err": err_f, "ok": passes(err_f, BF16, uses_dot=True)}
    return [elementwise, fused]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (for a CPU check of the script)")
    args = parser.parse_args()
    smoke = args.smoke
    if not smoke and INTERPRET:
        sys.exit("no GPU: run with --smoke to check the script through the Triton interpreter")
    torch.manual_seed(0)

    ceil = ceilings(smoke)
    bw = ceil["bandwidth_gbps"]
    print(f"ceilings: copy {bw:.0f} GB/s, cuBLAS bf16 {ceil['cublas_gemm_size']}^3 {ceil['cublas_tflops']:.0f} TFLOP/s",
          flush=True)

    # The model's linear layers: hidden 576, MLP 1536, vocabulary 49152 (LM head); M = tokens in flight.
    model_kn = [(576, 576), (576, 1536), (1536, 576), (576, 49152)]
    ms = [1, 16] if smoke else [1, 16, 64]
    gemm = [gemm_row(m, n, k, "model", bw) for m in ms for k, n in (model_kn[:2] if smoke else model_kn)]
    for s in ([64] if smoke else [1024, 2048, 4096]):
        gemm.append(gemm_row(s, s, s, "square", bw))
    print(table(gemm, ["M", "N", "K", "triton_tflops", "torch_tflops", "triton_vs_torch", "triton_gbps", "ok"]),
          flush=True)

    norm_shapes = [(4, 576), (64, 576)] if smoke else [(1, 576), (64, 576), (262144, 576), (32768, 4096), (16384, 8192)]
    norms = [rmsnorm_row(r, c, bw, residual=False) for r, c in norm_shapes]
    norms += [rmsnorm_row(r, c, bw, residual=True) for r, c in norm_shapes[-2:]]
    print(table(norms, ["rows", "cols", "residual", "triton_gbps", "torch_gbps", "triton_bw_fraction", "ok"]), flush=True)

    sw = []
    for m in ([1, 16] if smoke else [1, 16, 64, 4096]):
        sw += swiglu_rows(m, 64 if smoke else 576, 64 if smoke else 1536, bw)
    print(table(sw, ["op", "M", "triton_ms", "triton_unfused_ms", "torch_ms", "triton_gbps", "ok"]), flush=True)

    largest = gemm[-1]
    big_norm = max((r for r in norms if not r["residual"]), key=lambda r: r["bytes"])
    summary = {
        "gemm_largest": f"{largest['M']}^3", "gemm_vs_cublas": largest["triton_vs_torch"],
        "gemm_target_met": largest["triton_vs_torch"] >= 0.70,
        "rmsnorm_largest_bw_fraction": big_norm["triton_bw_fraction"],
        "rmsnorm_target_met": big_norm["triton_bw_fraction"] >= 0.70,
        "all_correct": all(r["ok"] for r in gemm + norms + sw),
    }
    path = write_results("ch07_kernels", {"smoke": smoke, "ceilings": ceil, "gemm": gemm, "rmsnorm": norms,
                                          "swiglu": sw, "summary": summary}, smoke)
    print(f"\nwrote {path}")
    print(table([
        {"what": "copy bandwidth (GB/s)", "value": bw},
        {"what": f"cuBLAS bf16 {ceil['cublas_gemm_size']}^3 (TFLOP/s)", "value": ceil["cublas_tflops"]},
        {"what": f"Triton GEMM {largest['M']}^3 (TFLOP/s)", "value": largest["triton_tflops"]},
        {"what": f"Triton / cuBLAS at {largest['M']}^3 (target >= 0.70)", "value": largest["triton_vs_torch"]},
        {"what": f"RMSNorm {big_norm['rows']}x{big_norm['cols']} (GB/s)", "value": big_norm["triton_gbps"]},
        {"what": "RMSNorm / copy bandwidth (target >= 0.70)", "value": big_norm["triton_bw_fraction"]},
        {"what": "every configuration correct", "value": summary["all_correct"]},
    ], ["what", "value"]))


if __name__ == "__main__":
    main()
