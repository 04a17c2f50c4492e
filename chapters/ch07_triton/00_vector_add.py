"""The smallest Triton kernel, out = x + y: programs, blocks and masks.

    python chapters/ch07_triton/00_vector_add.py

Without a GPU this runs in Triton's interpreter (TRITON_INTERPRET=1, set by interpret.py), one
program at a time in NumPy. With a GPU it also times the kernel against torch's x + y.
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import torch
import triton

from chapters.ch07_triton.add import add
from chapters.ch07_triton.bench import bench_ms
from chapters.ch07_triton.check import passes, poisoned, rel_err


def main() -> None:
    torch.manual_seed(0)
    print(f"device for kernel inputs: {KERNEL_DEVICE}  (interpreter: {INTERPRET})")
    block = 1024
    for n in [1, 1000, 4097]:
        x = torch.randn(n, device=KERNEL_DEVICE)
        y = torch.randn(n, device=KERNEL_DEVICE)
        out = add(x, y, out=poisoned((n,), x.dtype, KERNEL_DEVICE), block=block)
        programs = triton.cdiv(n, block)
        masked = programs * block - n  # lanes of the last program that the mask switches off
        err = rel_err(out, x.double() + y.double())
        print(f"n={n:5d}: {programs} program(s) of {block} lanes, {masked:4d} lanes masked off, "
              f"rel err {err:.1e} ({'ok' if passes(err, x.dtype) else 'FAIL'})")
    if not INTERPRET:
        n = 1 << 28  # 1 GiB per fp32 tensor: far beyond L2
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        for name, fn in [("triton add", lambda: add(x, y, out=out)), ("torch x + y", lambda: torch.add(x, y, out=out))]:
            ms = bench_ms(fn)
            print(f"{name:12s} n=2^28 fp32: {ms:.3f} ms, {3 * 4 * n / ms / 1e6:.0f} GB/s (2 reads + 1 write)")


if __name__ == "__main__":
    main()
