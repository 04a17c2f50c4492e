"""Tiled matrix multiplication C = A @ B (+ residual): tiles, the K loop, float32 accumulation,
autotuned block sizes, and grouped tile order for cache reuse.

Each program owns one BLOCK_M x BLOCK_N tile of C. It walks K in BLOCK_K steps, loading an
A tile [BLOCK_M, BLOCK_K] and a B tile [BLOCK_K, BLOCK_N] and accumulating their product in a
float32 register tile, then rounds once and stores. B may be any strided view, so a linear
layer's weight W [N, K] is passed as W.t() without a copy.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, check_tensors  # sets TRITON_INTERPRET first

import torch
import triton
import triton.language as tl


def _config(bm: int, bn: int, bk: int, group: int, stages: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group},
                         num_stages=stages, num_warps=warps)


# On a GPU the autotuner times each candidate once per (M, N, K, dtype) and keeps the fastest.
# Large tiles feed the tensor cores at big M; BLOCK_M=16/32 tiles are for decode (M = batch size),
# where the weight read dominates and narrow N tiles spread it over more programs.
GPU_CONFIGS = [
    _config(128, 256, 64, 8, 3, 8),
    _config(256, 128, 64, 8, 3, 8),
    _config(128, 128, 64, 8, 4, 8),
    _config(128, 128, 64, 8, 3, 4),
    _config(128, 64, 64, 8, 4, 4),
    _config(64, 128, 64, 8, 4, 4),
    _config(64, 64, 64, 8, 4, 4),
    _config(32, 64, 128, 8, 4, 4),
    _config(32, 128, 64, 8, 4, 4),
    _config(16, 64, 128, 8, 4, 4),
    _config(16, 32, 256, 8, 3, 4),
    _config(16, 128, 128, 8, 4, 4),
]
# The interpreter runs one program at a time in NumPy and cannot time anything: one small config,
# so autotune has nothing to choose and does not benchmark.
INTERPRETER_CONFIGS = [_config(16, 16, 16, 2, 1, 1)]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS


def prune_by_m(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Only time tiles whose height suits M: a 128-row tile for M=1 wastes 127 rows of work."""
    m = named_args["M"]
    if m > 64:
        kept = [c for c in configs if c.kwargs["BLOCK_M"] >= 64]
    else:
        tallest = 16 if m <= 16 else 32 if m <= 32 else 64
        kept = [c for c in configs if c.kwargs["BLOCK_M"] <= tallest]
    return kept or configs


@triton.jit
def tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Map the flat program id to a (row, column) tile, GROUP_M row-tiles at a time.

    Row-major order would stream all of B once per row of tiles; grouping GROUP_M row-tiles lets
    neighbouring programs share the same B columns while they are still in L2.
    """
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % group_size_m
    pid_n = (pid % pids_per_group) // group_size_m
    return pid_m, pid_n


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], prune_configs_by={"early_config_prune": prune_by_m})
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, r_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,
                  HAS_RESIDUAL: tl.constexpr, DOT_F32: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Rows/columns past the edge wrap around (% M, % N) instead of being masked: the loads stay in
    # bounds and unmasked (faster), and the wrapped results are simply never stored.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        # K is the one dimension that must be masked: a wrapped K would add wrong products.
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if DOT_F32:  # the interpreter cannot multiply bf16 tiles (see interpret.py)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)  # tensor cores on a GPU; float32 accumulator either way
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if HAS_RESIDUAL:  # epilogue: add the residual stream while the tile is still in registers
        acc += tl.load(r_ptr + rows[:, None] * stride_rm + cols[None, :] * stride_rn, mask=mask).to(tl.float32)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _grid(meta: dict, M: int, N: int) -> tuple[int]:
    return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)


def matmul(a: torch.Tensor, b: torch.Tensor, residual: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """a [M, K] @ b [K, N] (+ residual [M, N]) -> [M, N], float32 or bfloat16, any strides."""
    tensors = (a, b) if residual is None else (a, b, residual)
    check_tensors("matmul", *tensors, dtypes=(torch.float32, torch.bfloat16))
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul: expected 2-D a and b, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"matmul: inner dimensions differ (a is {M}x{K}, b is {K2}x{N})")
    if min(M, N, K) == 0:
        raise ValueError(f"matmul: empty dimension in a {tuple(a.shape)} @ b {tuple(b.shape)}")
    if residual is not None and residual.shape != (M, N):
        raise ValueError(f"matmul: residual shape {tuple(residual.shape)} != ({M}, {N})")
    out = torch.empty((M, N), dtype=a.dtype, device=a.device) if out is None else out
    if out.shape != (M, N) or out.dtype != a.dtype:
        raise ValueError(f"matmul: out must be ({M}, {N}) in {a.dtype}")
    r = out if residual is None else residual  # an unused pointer when there is no residual
    matmul_kernel[lambda meta: _grid(meta, M, N)](
        a, b, out, r, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        out.stride(0), out.stride(1), r.stride(0), r.stride(1),
        HAS_RESIDUAL=residual is not None, DOT_F32=INTERPRET)
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ weight[N, K].T (+ residual [..., N]): nn.Linear without bias, weight not copied."""
    if x.dim() < 1 or weight.dim() != 2:
        raise ValueError(f"linear: expected x [..., K] and weight [N, K], got {tuple(x.shape)}, {tuple(weight.shape)}")
    lead = x.shape[:-1]
    r2 = None if residual is None else residual.reshape(-1, residual.shape[-1])
    y = matmul(x.reshape(-1, x.shape[-1]), weight.t(), residual=r2)
    return y.view(*lead, weight.shape[0])
