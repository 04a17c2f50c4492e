"""Import this before `triton`: on a machine without a GPU it turns on Triton's interpreter.

`@triton.jit` reads TRITON_INTERPRET when a kernel is *decorated*, so the variable must be set
before any module that defines a kernel is imported. With it set, every kernel runs as NumPy code
on the CPU, one program at a time: slow, but the same indexing, masks and loops as on the GPU.

What the interpreter does not do (Triton 3.x): arithmetic on bfloat16 values. It stores bf16 as
raw uint16 bit patterns, and `tl.dot` on two bf16 tiles multiplies those bit patterns
(triton-lang/triton#11584; the maintainers' answer is that bf16 is not supported there yet, and
the debugging guide says to cast to float32 first). Our kernels therefore upcast every loaded
tile to float32 before arithmetic, which they want anyway for accuracy, and pass DOT_F32=INTERPRET
to the matmul kernels so that on the interpreter `tl.dot` sees float32 tiles. On the GPU the
bf16 tiles go to the tensor cores; bf16 x bf16 products are exact in float32, so the two paths
compute the same sums up to the order of additions.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"
# Where kernel inputs live: the interpreter reads CPU tensors; compiled kernels need CUDA ones.
KERNEL_DEVICE: str = "cpu" if INTERPRET else "cuda"


def check_tensors(name: str, *tensors: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> None:
    """Raise ValueError unless the tensors share one allowed dtype and a device the kernels can run on."""
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name}: expected torch.Tensor, got {type(t).__name__}")
        if t.dtype not in dtypes:
            raise ValueError(f"{name}: dtype {t.dtype} not supported (use one of {dtypes})")
        if t.dtype != tensors[0].dtype:
            raise ValueError(f"{name}: dtypes differ ({tensors[0].dtype} vs {t.dtype})")
        if t.device != tensors[0].device:
            raise ValueError(f"{name}: tensors on different devices ({tensors[0].device} vs {t.device})")
        if not INTERPRET and t.device.type != "cuda":
            raise ValueError(f"{name}: tensor on {t.device}; compiled Triton kernels need CUDA tensors "
                             "(or set TRITON_INTERPRET=1 to run on the CPU)")
