"""The machine's ceilings, measured rather than copied from a datasheet.

Two numbers bound every operation of an LLM step:

* memory bandwidth: bytes per second the memory system moves, from a large copy (bytes read plus
  bytes written, divided by the time);
* matrix throughput: floating-point operations per second of a large matrix multiply in the dtype
  the engine uses (float32 on a CPU, bfloat16 on a GPU).

Their ratio, FLOP/s divided by bytes/s, is the roofline's ridge point: an operation doing fewer
FLOPs per byte than that waits for memory; one doing more waits for the arithmetic units.

A third number explains what the roofline cannot: the fixed cost of launching one tiny operation.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from shared.config import dtype_for


def time_op(fn: Callable[[], object], device: str, repeats: int = 10, inner: int = 1,
            warmup: int = 2) -> list[float]:
    """Seconds per call of `fn`, one sample per repeat, each the mean over `inner` back-to-back calls.

    On a GPU, CUDA events bracket the calls, so the time is the GPU's, not the host's: the host only
    queues the work, and a host clock would stop before the GPU finishes."""
    for _ in range(warmup):
        fn()
    samples = []
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1000 / inner)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) / inner)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "repeats": len(samples)}


def memory_bandwidth(device: str, nbytes: int, repeats: int = 10) -> dict[str, Any]:
    """A copy of `nbytes` reads nbytes and writes nbytes: both cross the memory bus."""
    src = torch.randn(nbytes // 4, device=device)  # float32: 4 bytes per element
    dst = torch.empty_like(src)
    samples = time_op(lambda: dst.copy_(src), device, repeats)
    moved = 2 * src.numel() * src.element_size()
    stats = _summary(samples)
    return {"bytes_moved": moved, **stats, "bytes_per_s": moved / stats["median_s"]}


def matmul_throughput(device: str, n: int, dtype: torch.dtype, repeats: int = 10) -> dict[str, Any]:
    """An n×n by n×n matmul does n³ multiply-adds = 2n³ FLOPs. Random data: some hardware runs
    faster on zeros (less switching power, so higher clocks), which would flatter the ceiling."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    samples = time_op(lambda: torch.mm(a, b, out=out), device, repeats)
    flops = 2 * n**3
    stats = _summary(samples)
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "flops": flops, **stats,
            "flop_per_s": flops / stats["median_s"]}


def op_overhead(device: str, calls: int = 2000) -> dict[str, Any]:
    """The fixed cost of one tiny operation (an add on 1 element): Python, the dispatcher and, on a
    GPU, the kernel launch. No roofline predicts it, and a decode step runs hundreds of such ops."""
    x = torch.zeros(1, device=device)
    gpu = time_op(lambda: x.add_(1.0), device, repeats=5, inner=calls)
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        x.add_(1.0)
    host = (time.perf_counter() - t0) / calls
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
    return {"per_op_s": statistics.median(gpu), "host_enqueue_per_op_s": host, "calls": calls}


def pin_threads(device: str, threads: int | None) -> None:
    """On a CPU shared with other jobs, a parallel region waits for its slowest thread, and a
    preempted thread makes it crawl (measured here: decode attention 8 ms with 2 threads under a
    load of 5, 44 us with 1). Chapter 6's CPU numbers therefore use one thread unless told."""
    if not str(device).startswith("cuda") and threads:
        torch.set_num_threads(threads)


def measure(device: str, quick: bool = False) -> dict[str, Any]:
    """All ceilings of one device. `quick` shrinks sizes for tests (the numbers are then not
    ceilings, only the structure is)."""
    cuda = str(device).startswith("cuda")
    dtype = dtype_for(device)
    if quick:
        nbytes, n, repeats = 8 << 20, 256, 3
    elif cuda:
        nbytes, n, repeats = 2 << 30, 8192, 20  # 2 GiB: far beyond the H200's 50 MB L2
    else:
        nbytes, n, repeats = 256 << 20, 2048, 7  # 256 MiB: far beyond a 32 MB L3
    load_before = os.getloadavg()[0]
    bw = memory_bandwidth(device, nbytes, repeats)
    mm = matmul_throughput(device, n, dtype, repeats)
    overhead = op_overhead(device, calls=200 if quick else 2000)
    return {
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "memory_bandwidth": bw,
        "matmul": mm,
        # FLOPs per byte at which an op stops waiting on memory and starts waiting on arithmetic.
        "ridge_flop_per_byte": mm["flop_per_s"] / bw["bytes_per_s"],
        "op_overhead": overhead,
        "load": {"loadavg_1m_before": round(load_before, 2),
                 "loadavg_1m_after": round(os.getloadavg()[0], 2),
                 "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()},
        "quick": quick,
    }


def table(c: dict[str, Any]) -> str:
    return "\n".join([
        f"ceilings on {c['device']} ({c['dtype']}), load {c['load']['loadavg_1m_before']}"
        f" -> {c['load']['loadavg_1m_after']} on {c['load']['cpu_count']} cores",
        f"  memory bandwidth   {c['memory_bandwidth']['bytes_per_s'] / 1e9:10.1f} GB/s"
        f"   (copy, {c['memory_bandwidth']['bytes_moved'] / 2**20:.0f} MiB moved)",
        f"  matmul throughput  {c['matmul']['flop_per_s'] / 1e12:10.3f} TFLOP/s"
        f" ({c['matmul']['n']}^3 {c['matmul']['dtype']})",
        f"  ridge point        {c['ridge_flop_per_byte']:10.1f} FLOP/byte",
        f"  tiny-op cost       {c['op_overhead']['per_op_s'] * 1e6:10.2f} us per op",
    ])
