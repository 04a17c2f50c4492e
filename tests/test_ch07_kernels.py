"""Chapter 7's kernels against PyTorch: relative error vs a float64 reference, per-dtype tolerance,
NaN-poisoned outputs (an element the kernel never writes fails the test), shapes that are not
multiples of the block sizes. On a machine without a GPU they run in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch

from chapters.ch07_triton.interpret import KERNEL_DEVICE
from chapters.ch07_triton.add import add
from chapters.ch07_triton.check import passes, poisoned, rel_err
from chapters.ch07_triton.matmul import linear, matmul
from chapters.ch07_triton.rmsnorm import rmsnorm, rmsnorm_torch
from chapters.ch07_triton.swiglu import matmul_swiglu, swiglu, swiglu_torch

DTYPES = [torch.float32, torch.bfloat16]


def rand(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(KERNEL_DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_add(n: int, dtype: torch.dtype) -> None:
    x, y = rand(n, dtype=dtype, seed=n), rand(n, dtype=dtype, seed=n + 1)
    out = add(x, y, out=poisoned((n,), dtype, KERNEL_DEVICE))
    assert passes(rel_err(out, x.double() + y.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 576), (7, 100), (3, 5, 64), (33, 17)])
def test_rmsnorm(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x, w = rand(*shape, dtype=dtype, seed=1), rand(shape[-1], dtype=dtype, seed=2)
    out = rmsnorm(x, w, eps=1e-5, out=poisoned(shape, dtype, KERNEL_DEVICE))
    assert passes(rel_err(out, rmsnorm_torch(x.double(), w.double(), 1e-5)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_fused_residual(dtype: torch.dtype) -> None:
    x, w, r = rand(9, 130, dtype=dtype, seed=3), rand(130, dtype=dtype, seed=4), rand(9, 130, dtype=dtype, seed=5)
    expected_sum = x.double() + r.double()
    out = rmsnorm(x, w, residual=r, out=poisoned((9, 130), dtype, KERNEL_DEVICE))
    assert passes(rel_err(r, expected_sum), dtype)  # residual now holds x + residual
    assert passes(rel_err(out, rmsnorm_torch(expected_sum, w.double())), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mnk", [(1, 96, 576), (37, 45, 70), (16, 32, 16), (64, 17, 33)])
def test_matmul(mnk: tuple[int, int, int], dtype: torch.dtype) -> None:
    m, n, k = mnk
    a, w = rand(m, k, dtype=dtype, seed=m), rand(n, k, dtype=dtype, seed=n)
    # b = w.t() is a strided view (a linear layer's weight), exercising the stride arguments.
    out = matmul(a, w.t(), out=poisoned((m, n), dtype, KERNEL_DEVICE))
    assert passes(rel_err(out, a.double() @ w.double().t()), dtype, uses_dot=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_with_residual_epilogue(dtype: torch.dtype) -> None:
    x, w, r = rand(2, 3, 40, dtype=dtype, seed=6), rand(24, 40, dtype=dtype, seed=7), rand(2, 3, 24, dtype=dtype, seed=8)
    out = linear(x, w, residual=r)
    assert out.shape == (2, 3, 24)
    assert passes(rel_err(out, x.double() @ w.double().t() + r.double()), dtype, uses_dot=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 66), (2, 3, 2 * 1536), (1, 2)])
def test_swiglu(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    gu = rand(*shape, dtype=dtype, seed=9)
    i = shape[-1] // 2
    out = swiglu(gu, out=poisoned((*shape[:-1], i), dtype, KERNEL_DEVICE))
    assert passes(rel_err(out, swiglu_torch(gu[..., :i].double(), gu[..., i:].double())), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mki", [(1, 64, 48), (17, 70, 40)])
def test_matmul_swiglu(mki: tuple[int, int, int], dtype: torch.dtype) -> None:
    m, k, i = mki
    x = rand(m, k, dtype=dtype, seed=10)
    w_gate_up = rand(2 * i, k, dtype=dtype, seed=11)  # the stacked [W_gate; W_up] weight, as in vLLM
    wg, wu = w_gate_up[:i], w_gate_up[i:]
    out = matmul_swiglu(x, wg.t(), wu.t(), out=poisoned((m, i), dtype, KERNEL_DEVICE))
    ref = swiglu_torch(x.double() @ wg.double().t(), x.double() @ wu.double().t())
    assert passes(rel_err(out, ref), dtype, uses_dot=True)


def test_rel_err_sees_unwritten_elements() -> None:
    out = torch.zeros(4)
    out[2] = float("nan")
    assert not passes(rel_err(out, torch.zeros(4)), torch.float32)


def z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype, device=KERNEL_DEVICE)


@pytest.mark.parametrize("call, message", [
    (lambda: add(z(3), z(4)), "shapes differ"),
    (lambda: add(z(3, dtype=torch.float16), z(3, dtype=torch.float16)), "not supported"),
    (lambda: add(z(3), z(3, dtype=torch.bfloat16)), "dtypes differ"),
    (lambda: add(z(4, 4).t(), z(4, 4)), "contiguous"),
    (lambda: add([1.0], [2.0]), "expected torch.Tensor"),
    (lambda: rmsnorm(z(2, 8), z(7)), "weight shape"),
    (lambda: rmsnorm(z(2, 8), z(8), eps=0.0), "eps"),
    (lambda: matmul(z(2, 3), z(4, 5)), "inner dimensions"),
    (lambda: matmul(z(2, 3, 4), z(4, 5)), "2-D"),
    (lambda: matmul(z(0, 3), z(3, 5)), "empty"),
    (lambda: swiglu(z(2, 7)), "even"),
    (lambda: matmul_swiglu(z(2, 3), z(3, 4), z(3, 5)), "expected x"),
])
def test_bad_input_is_a_clear_value_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
