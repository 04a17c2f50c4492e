"""Every chapter-7 kernel against a float64 reference over a grid of shapes and both dtypes, with
NaN-poisoned outputs; the table is saved as results/cpu/ch07_correctness.json (results/gpu or $OUT
on a GPU) for the book to quote.

    python chapters/ch07_triton/04_correctness.py
"""

from __future__ import annotations

from chapters.ch07_triton.interpret import INTERPRET, KERNEL_DEVICE  # before triton: sets the interpreter

import time
from typing import Callable

import torch

from chapters.ch07_triton.add import add
from chapters.ch07_triton.bench import markdown_table, table
from chapters.ch07_triton.check import passes, poisoned, rel_err, tolerance
from chapters.ch07_triton.matmul import matmul
from chapters.ch07_triton.rmsnorm import rmsnorm, rmsnorm_torch
from chapters.ch07_triton.swiglu import matmul_swiglu, swiglu, swiglu_torch
from shared.benchmark.provenance import save_results

DEV = KERNEL_DEVICE


def r(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device=DEV).to(dtype)


def case_add(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = r(n, dtype=dtype), r(n, dtype=dtype)
    return add(x, y, out=poisoned((n,), dtype, DEV)), x.double() + y.double()


def case_rmsnorm(rows: int, cols: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = r(rows, cols, dtype=dtype), r(cols, dtype=dtype)
    return rmsnorm(x, w, out=poisoned((rows, cols), dtype, DEV)), rmsnorm_torch(x.double(), w.double())


def case_matmul(m: int, n: int, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    a, w = r(m, k, dtype=dtype), r(n, k, dtype=dtype)
    return matmul(a, w.t(), out=poisoned((m, n), dtype, DEV)), a.double() @ w.double().t()


def case_swiglu(m: int, inter: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gu = r(m, 2 * inter, dtype=dtype)
    ref = swiglu_torch(gu[:, :inter].double(), gu[:, inter:].double())
    return swiglu(gu, out=poisoned((m, inter), dtype, DEV)), ref


def case_matmul_swiglu(m: int, k: int, inter: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x, wg, wu = r(m, k, dtype=dtype), r(inter, k, dtype=dtype), r(inter, k, dtype=dtype)
    ref = swiglu_torch(x.double() @ wg.double().t(), x.double() @ wu.double().t())
    return matmul_swiglu(x, wg.t(), wu.t(), out=poisoned((m, inter), dtype, DEV)), ref


def case_matmul_then_swiglu(m: int, k: int, inter: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The unfused pair, for comparison: the [M, 2I] GEMM output is rounded to dtype before SwiGLU."""
    x, w = r(m, k, dtype=dtype), r(2 * inter, k, dtype=dtype)
    ref = swiglu_torch(x.double() @ w[:inter].double().t(), x.double() @ w[inter:].double().t())
    return swiglu(matmul(x, w.t())), ref


CASES: list[tuple[str, Callable, tuple[int, ...], bool]] = [
    ("add", case_add, (1,), False), ("add", case_add, (4097,), False), ("add", case_add, (100_000,), False),
    ("rmsnorm", case_rmsnorm, (1, 576), False), ("rmsnorm", case_rmsnorm, (33, 100), False),
    ("rmsnorm", case_rmsnorm, (64, 1536), False),
    ("matmul", case_matmul, (1, 576, 576), True), ("matmul", case_matmul, (37, 45, 70), True),
    ("matmul", case_matmul, (64, 96, 576), True),
    ("swiglu", case_swiglu, (1, 1536), False), ("swiglu", case_swiglu, (17, 100), False),
    ("matmul_swiglu", case_matmul_swiglu, (1, 576, 64), True), ("matmul_swiglu", case_matmul_swiglu, (17, 70, 40), True),
    ("matmul_swiglu", case_matmul_swiglu, (16, 576, 256), True),
    ("matmul_then_swiglu", case_matmul_then_swiglu, (16, 576, 256), True),
]


def main() -> None:
    torch.manual_seed(0)
    rows = []
    for name, fn, shape, uses_dot in CASES:
        for dtype in (torch.float32, torch.bfloat16):
            start = time.perf_counter()
            out, ref = fn(*shape, dtype)
            err = rel_err(out, ref)
            rows.append({"kernel": name, "shape": "x".join(map(str, shape)), "dtype": str(dtype).split(".")[-1],
                         "rel_err": err, "tolerance": tolerance(dtype, uses_dot), "ok": passes(err, dtype, uses_dot),
                         "seconds": round(time.perf_counter() - start, 3)})
    columns = ["kernel", "shape", "dtype", "rel_err", "tolerance", "ok", "seconds"]
    print(table(rows, columns))
    body = {"interpreter": INTERPRET, "reference": "float64 PyTorch on the same (rounded) inputs",
            "metric": "||out - ref|| / ||ref||, outputs NaN-poisoned before each run", "seed": 0,
            "rows": rows, "all_ok": all(row["ok"] for row in rows)}
    path = save_results("ch07_correctness", body, device=DEV)
    path.with_suffix(".md").write_text(markdown_table(rows, columns))  # the book includes this table
    print(f"all ok: {body['all_ok']}; wrote {path}")


if __name__ == "__main__":
    main()
