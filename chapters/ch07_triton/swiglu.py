"""Fused SwiGLU, the Llama MLP's activation: silu(gate) * up, two ways.

1. `swiglu(gate_up)`: an elementwise kernel over the output of one GEMM with the stacked weight
   [W_gate; W_up] (vLLM's SiluAndMul): reads 2*I values per row, writes I, in one kernel instead
   of three (silu, multiply, and the slicing copies).
2. `matmul_swiglu(x, w_gate, w_up)`: the activation moved into the GEMM's epilogue. One program
   computes the same output tile of x @ w_gate and x @ w_up (two accumulators sharing each A
   tile), then writes silu(gate) * up: the [M, 2I] intermediate never reaches memory.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, check_tensors  # sets TRITON_INTERPRET first

import torch
import triton
import triton.language as tl

from chapters.ch07_triton.matmul import INTERPRETER_CONFIGS, _config, prune_by_m, tile_ids


@triton.jit
def silu_mul(gate, up):
    # silu(g) = g * sigmoid(g) = g / (1 + e^-g), in float32.
    return gate / (1.0 + tl.exp(-gate)) * up


@triton.jit
def swiglu_kernel(x_ptr, out_ptr, n_rows, inter, stride_x, stride_o, BLOCK: tl.constexpr):
    # 2-D grid: axis 0 = row, axis 1 = BLOCK-wide chunk of that row's I outputs.
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, silu_mul(gate, up).to(out_ptr.dtype.element_ty), mask=mask)


def swiglu(gate_up: torch.Tensor, out: torch.Tensor | None = None, block: int = 1024) -> torch.Tensor:
    """gate_up [..., 2I] (gate first, then up) -> silu(gate) * up, shape [..., I]."""
    check_tensors("swiglu", gate_up, dtypes=(torch.float32, torch.bfloat16))
    if gate_up.dim() < 1 or gate_up.shape[-1] == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"swiglu: last dimension must be even and non-zero, got shape {tuple(gate_up.shape)}")
    if not gate_up.is_contiguous():
        raise ValueError("swiglu: gate_up must be contiguous")
    inter = gate_up.shape[-1] // 2
    shape = (*gate_up.shape[:-1], inter)
    out = torch.empty(shape, dtype=gate_up.dtype, device=gate_up.device) if out is None else out
    if tuple(out.shape) != shape or out.dtype != gate_up.dtype or not out.is_contiguous():
        raise ValueError(f"swiglu: out must be contiguous, shape {shape}, dtype {gate_up.dtype}")
    x2, o2 = gate_up.view(-1, 2 * inter), out.view(-1, inter)
    if x2.shape[0] == 0:
        return out
    grid = (x2.shape[0], triton.cdiv(inter, block))
    swiglu_kernel[grid](x2, o2, x2.shape[0], inter, x2.stride(0), o2.stride(0), BLOCK=block)
    return out


# Two B tiles and two accumulators per program: the tiles are at most 128 x 128 to fit registers.
GPU_CONFIGS = [
    _config(128, 128, 64, 8, 3, 8),
    _config(128, 64, 64, 8, 4, 4),
    _config(64, 128, 64, 8, 4, 4),
    _config(64, 64, 64, 8, 4, 4),
    _config(32, 64, 128, 8, 4, 4),
    _config(16, 64, 128, 8, 4, 4),
    _config(16, 32, 256, 8, 3, 4),
]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"], prune_configs_by={"early_config_prune": prune_by_m})
@triton.jit
def matmul_swiglu_kernel(a_ptr, g_ptr, u_ptr, c_ptr, M, N, K,
                         stride_am, stride_ak, stride_gk, stride_gn, stride_uk, stride_un, stride_cm, stride_cn,
                         DOT_F32: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # The K loop of matmul_kernel, with a second B operand (W_up) next to the first (W_gate).
    pid_m, pid_n = tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    g_ptrs = g_ptr + offs_k[:, None] * stride_gk + offs_n[None, :] * stride_gn
    u_ptrs = u_ptr + offs_k[:, None] * stride_uk + offs_n[None, :] * stride_un
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        g = tl.load(g_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        u = tl.load(u_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if DOT_F32:  # the interpreter cannot multiply bf16 tiles (see interpret.py)
            a = a.to(tl.float32)
            g = g.to(tl.float32)
            u = u.to(tl.float32)
        acc_gate = tl.dot(a, g, acc_gate)  # the A tile is loaded once and used twice
        acc_up = tl.dot(a, u, acc_up)
        a_ptrs += BLOCK_K * stride_ak
        g_ptrs += BLOCK_K * stride_gk
        u_ptrs += BLOCK_K * stride_uk
    # Epilogue: the activation is computed on the float32 accumulators, rounded once.
    c = silu_mul(acc_gate, acc_up)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, c.to(c_ptr.dtype.element_ty), mask=mask)


def matmul_swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(x @ w_gate) * (x @ w_up) for x [M, K], w_gate and w_up [K, I] (any strides:
    pass a linear layer's weight [I, K] as weight.t())."""
    check_tensors("matmul_swiglu", x, w_gate, w_up, dtypes=(torch.float32, torch.bfloat16))
    if x.dim() != 2 or w_gate.dim() != 2 or w_gate.shape != w_up.shape:
        raise ValueError(f"matmul_swiglu: expected x [M, K] and two [K, I] weights, got {tuple(x.shape)}, "
                         f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}")
    (M, K), (K2, N) = x.shape, w_gate.shape
    if K != K2:
        raise ValueError(f"matmul_swiglu: x has K={K} but the weights have K={K2}")
    if min(M, N, K) == 0:
        raise ValueError("matmul_swiglu: empty dimension")
    out = torch.empty((M, N), dtype=x.dtype, device=x.device) if out is None else out
    if out.shape != (M, N) or out.dtype != x.dtype:
        raise ValueError(f"matmul_swiglu: out must be ({M}, {N}) in {x.dtype}")
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    matmul_swiglu_kernel[grid](x, w_gate, w_up, out, M, N, K, x.stride(0), x.stride(1),
                               w_gate.stride(0), w_gate.stride(1), w_up.stride(0), w_up.stride(1),
                               out.stride(0), out.stride(1), DOT_F32=INTERPRET)
    return out


def swiglu_torch(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The reference (pass float64 tensors for the exact answer)."""
    return torch.nn.functional.silu(gate) * up
