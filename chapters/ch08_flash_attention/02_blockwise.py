"""Exact attention one block of keys at a time, in plain PyTorch: the online-softmax rescaling
applied to whole rows of queries. Same answer as naive attention; memory O(T x block), not O(T^2).

    python chapters/ch08_flash_attention/02_blockwise.py
"""

from __future__ import annotations

import time

import torch

from chapters.ch07_triton.check import rel_err
from chapters.ch08_flash_attention.attention import blockwise_attention, naive_attention, naive_peak_bytes
from shared.config import DEVICE

HQ, HKV, D = 9, 3, 64


def main() -> None:
    torch.manual_seed(0)
    t = 1024 if DEVICE == "cpu" else 8192
    dtype = torch.float32 if DEVICE == "cpu" else torch.bfloat16
    q = torch.randn(1, HQ, t, D, device=DEVICE).to(dtype)
    k, v = (torch.randn(1, HKV, t, D, device=DEVICE).to(dtype) for _ in range(2))
    ref = naive_attention(q.double(), k.double(), v.double())
    for block in (64, 256, 1024):
        start = time.perf_counter()
        out = blockwise_attention(q, k, v, block=block)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        # Per block: float32 scores and their exponentials, [heads, T, block] each.
        live = 8 * HQ * t * block
        print(f"block {block:5d}: rel err {rel_err(out, ref):.1e}, {t // block + (t % block > 0):3d} iterations, "
              f"~{live / 2**20:7.1f} MiB of scores alive (naive: {naive_peak_bytes(1, HQ, t, t) / 2**20:.0f} MiB), "
              f"{ms:.0f} ms (one run, {DEVICE})")


if __name__ == "__main__":
    main()
