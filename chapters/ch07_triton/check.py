"""How a kernel is judged: relative error against a float64 reference, and every output written.

Shared by the tests, the numbered files and the GPU benchmark, so all three apply one rule.
"""

from __future__ import annotations

import torch

# ||out - ref|| / ||ref||, with ref computed in float64 from the same (rounded) inputs.
# float32 kernels accumulate in float32: ~1e-6 is typical, 1e-5 leaves room. bf16 outputs are
# rounded once to 8 mantissa bits (relative step 2^-8 = 3.9e-3), so ~2e-3 is typical, 1e-2 bounds it.
TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
# On a GPU, tl.dot on float32 tiles uses TF32 (10-bit mantissa) unless told otherwise: the same
# kernel is then only ~1e-3 accurate. Matmul checks on a GPU use this for float32.
TF32_TOLERANCE = 2e-3


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error; NaN if any output element is NaN (e.g. never written)."""
    out64, ref64 = out.double(), ref.double()
    if torch.isnan(out64).any():
        return float("nan")
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def tolerance(dtype: torch.dtype, uses_dot: bool = False) -> float:
    if uses_dot and dtype == torch.float32 and torch.cuda.is_available():
        return TF32_TOLERANCE
    return TOLERANCE[dtype]


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """An output buffer full of NaN: any element the kernel forgets to write shows up in rel_err."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def passes(err: float, dtype: torch.dtype, uses_dot: bool = False) -> bool:
    return err == err and err <= tolerance(dtype, uses_dot)  # err == err is False for NaN
