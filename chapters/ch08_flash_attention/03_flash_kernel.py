"""The Triton flash-attention forward kernel: each program holds BLOCK_M queries and streams the
keys/values of its KV head through, keeping scores in registers. Causal, grouped-query (9 query
heads read 3 KV heads, no copies), bf16 and fp32, any length, and a prefill after a cached prefix.

    python chapters/ch08_flash_attention/03_flash_kernel.py
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import torch
import torch.nn.functional as F

from chapters.ch07_triton.bench import bench_ms
from chapters.ch07_triton.check import passes, poisoned, rel_err
from chapters.ch08_flash_attention.attention import naive_attention
from chapters.ch08_flash_attention.flash import flash_attention, flash_fwd_kernel

HQ, HKV, D = 9, 3, 64


def main() -> None:
    torch.manual_seed(0)
    print(f"kernel inputs on {KERNEL_DEVICE} (interpreter: {INTERPRET})")
    # (Tq, Tk): one token, a length below one block, several blocks with a partial last one,
    # and 7 new tokens after a 40-token cached prefix (queries at positions 40..46).
    for dtype in (torch.float32, torch.bfloat16):
        for tq, tk in [(1, 1), (17, 17), (100, 100), (7, 47)]:
            q = torch.randn(1, HQ, tq, D, device=KERNEL_DEVICE).to(dtype)
            k, v = (torch.randn(1, HKV, tk, D, device=KERNEL_DEVICE).to(dtype) for _ in range(2))
            out = flash_attention(q, k, v, causal=True, out=poisoned(tuple(q.shape), dtype, KERNEL_DEVICE))
            err = rel_err(out, naive_attention(q.double(), k.double(), v.double()))
            print(f"{str(dtype):15s} Tq={tq:3d} Tk={tk:3d}: rel err vs naive (float64) {err:.1e} "
                  f"({'ok' if passes(err, dtype, uses_dot=True) else 'FAIL'})")
    print(f"config: {flash_fwd_kernel.best_config.kwargs}")
    if not INTERPRET:
        t = 8192
        q = torch.randn(1, HQ, t, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, HKV, t, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        flop = 4 * HQ * t * t * D / 2
        for name, fn in [("triton flash", lambda: flash_attention(q, k, v)),
                         ("torch SDPA", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))]:
            ms = bench_ms(fn)
            print(f"{name:12s} T={t}: {ms:.3f} ms, {flop / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
