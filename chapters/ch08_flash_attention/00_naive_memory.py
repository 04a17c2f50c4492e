"""Naive attention's memory: the score matrix grows with the square of the length.

    python chapters/ch08_flash_attention/00_naive_memory.py

Prints the formula (8 bytes per score: float32 scores and probabilities alive together) for the
model's 9 heads up to 16,384 tokens, then measures the real peak:
- on a GPU, torch.cuda.max_memory_allocated() around one call, minus what was allocated before;
- on a CPU, the peak resident set size (VmHWM in /proc/self/status) during one call, after resetting
  it (writing 5 to /proc/self/clear_refs, Linux >= 4.0), minus the resident size before the call;
  each length in a fresh child process. RSS counts pages the process touched, not tensors: allocator
  caching and page rounding blur it by a few MiB.
Writes results/cpu/ch08_naive_memory.json (results/gpu or $OUT on a GPU).
"""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from chapters.ch08_flash_attention.attention import naive_attention, naive_peak_bytes
from chapters.ch07_triton.bench import markdown_table
from shared.benchmark.provenance import save_results

HQ, HKV, D = 9, 3, 64
CHILD = """
import json, sys, torch
from chapters.ch08_flash_attention.attention import naive_attention
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024  # reported in KiB
t = int(sys.argv[1])
torch.set_num_threads(1)
q, k, v = torch.randn(1, 9, t, 64), torch.randn(1, 3, t, 64), torch.randn(1, 3, t, 64)
naive_attention(q[:, :, :8], k[:, :, :8], v[:, :, :8])  # warm up torch's lazy initialisation
open("/proc/self/clear_refs", "w").write("5")  # reset the peak to the current resident size
before = status("VmRSS")
naive_attention(q, k, v)
print(json.dumps({"peak_growth_bytes": status("VmHWM") - before}))
"""


def measure_cpu(t: int) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, str(t)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_growth_bytes"]


def measure_gpu(t: int) -> int:
    q = torch.randn(1, HQ, t, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, HKV, t, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    naive_attention(q, k, v)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def main() -> None:
    print("formula: 8 bytes x heads x T x T (float32 scores + probabilities), 9 heads, batch 1")
    for t in [512, 2048, 8192, 16384]:
        print(f"  T={t:6d}: {naive_peak_bytes(1, HQ, t, t) / 2**30:8.3f} GiB   (q, k, v themselves: "
              f"{(HQ + 2 * HKV) * t * D * 4 / 2**20:.1f} MiB in fp32)")
    gpu = torch.cuda.is_available()
    lengths = [1024, 2048, 4096, 8192] if gpu else [256, 512, 1024, 2048]
    rows = []
    for t in lengths:
        measured = measure_gpu(t) if gpu else measure_cpu(t)
        formula = naive_peak_bytes(1, HQ, t, t)
        rows.append({"T": t, "formula_bytes": formula, "measured_bytes": measured, "ratio": measured / formula,
                     "formula_MiB": formula / 2**20, "measured_MiB": measured / 2**20})
        print(f"measured T={t:5d}: {measured / 2**20:8.1f} MiB vs formula {formula / 2**20:8.1f} MiB "
              f"(ratio {measured / formula:.2f})")
    body = {"method": "torch.cuda.max_memory_allocated" if gpu else "VmHWM after clear_refs reset minus VmRSS before, fresh process",
            "dtype": "bfloat16" if gpu else "float32", "heads": HQ, "kv_heads": HKV, "head_dim": D, "rows": rows}
    path = save_results("ch08_naive_memory", body, device="cuda" if gpu else "cpu")
    path.with_suffix(".md").write_text(markdown_table(rows, ["T", "formula_MiB", "measured_MiB", "ratio"]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
