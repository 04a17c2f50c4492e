"""Suite-wide settings.

One torch thread: on a small shared machine (2 cores, CI or a developer's box with other work on
it) torch's default of one thread per core made every model step about 10x slower through
oversubscription (results/cpu/ch01_offline_torch_default_threads.json). Tests measure correctness,
not speed, so they take the setting that is fast everywhere.

Triton's interpreter on a machine without a GPU: `@triton.jit` reads TRITON_INTERPRET when a kernel
is decorated, so it is set here, before any test module imports a kernel (chapters 7 and 8).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(1)
