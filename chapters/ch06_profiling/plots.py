"""Chapter 6's plots. matplotlib is optional (the GPU box lacks it): without it, no plot is drawn
and the caller says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.benchmark.report import save_figure


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def roofline(result: dict[str, Any], path: Path) -> Path | None:
    """The two roofs, and every op placed at (intensity, FLOP/s it achieved when measured)."""
    plt = _pyplot()
    if plt is None:
        return None
    c = result["ceilings"]
    peak, bw = c["matmul"]["flop_per_s"], c["memory_bandwidth"]["bytes_per_s"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [10 ** (i / 20) for i in range(-40, 101)]
    ax.plot(xs, [min(peak, bw * x) for x in xs], "k-", label="roofline (measured ceilings)")
    ax.axvline(c["ridge_flop_per_byte"], color="grey", ls=":", lw=1)
    for key, marker, label in (("decode_ops", "o", "decode step"), ("prefill_ops", "s", "prefill")):
        for r in result[key]:
            if r["flops"] == 0:
                continue
            y = r["flops"] / r["measured_s"]
            ax.scatter(r["intensity"], y, marker=marker, s=28,
                       color="tab:blue" if key == "decode_ops" else "tab:orange")
            ax.annotate(r["name"], (r["intensity"], y), fontsize=6, xytext=(3, 2),
                        textcoords="offset points")
        ax.scatter([], [], marker=marker, label=f"{label} ops (measured)",
                   color="tab:blue" if key == "decode_ops" else "tab:orange")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved FLOP/s", title=f"Roofline on {result['device']} ({result['dtype']})")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def by_length(result: dict[str, Any], path: Path) -> Path | None:
    plt = _pyplot()
    if plt is None:
        return None
    rows = result["by_length"]
    t = [r["tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(t, [r["prefill_measured_s"] * 1e3 for r in rows], "o-", label="prefill, measured")
    ax.plot(t, [r["prefill_predicted"]["roofline_s"] * 1e3 for r in rows], "o--",
            label="prefill, roofline")
    ax.plot(t, [r["decode_step_measured_s"] * 1e3 for r in rows], "s-", label="one decode step, measured")
    ax.plot(t, [r["decode_predicted"]["roofline_s"] * 1e3 for r in rows], "s--",
            label="one decode step, roofline")
    ax.set(xscale="log", yscale="log", xlabel="prompt / context length (tokens)", ylabel="ms",
           title=f"Prefill vs one decode step on {result['device']}")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def by_batch(result: dict[str, Any], path: Path) -> Path | None:
    plt = _pyplot()
    if plt is None:
        return None
    rows = result["by_batch"]
    b = [r["batch"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(b, [r["measured_s"] * 1e3 for r in rows], "o-", label="decode step, measured")
    ax.plot(b, [r["predicted"]["roofline_s"] * 1e3 for r in rows], "o--", label="roofline")
    ax.plot(b, [r["predicted"]["with_op_floor_s"] * 1e3 for r in rows], ":",
            label="roofline + tiny-op floor")
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="ms per step",
           title=f"Decode step vs batch size on {result['device']} "
                 f"(context {result['settings']['batch_context']})")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
