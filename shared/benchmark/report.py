"""Printing and plotting benchmark results: the seed book's single-stream table, a `vllm bench
serve`-style load table, an engine comparison table, and matplotlib plots saved next to the JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.benchmark.offline import Comparison, OfflineResult
from shared.benchmark.online import LoadResult


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, first column left-aligned, the rest right-aligned."""
    cells = [list(headers)] + [[_fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


def _mean(summary: dict[str, Any], key: str) -> float | None:
    return summary[key].get("mean")


def _spread(stats: dict[str, Any], digits: int = 1) -> str:
    """mean ± sd over runs, with the run count, e.g. "10.8 ± 0.4 (n=3)"."""
    if not stats.get("count"):
        return "-"
    return f"{stats['mean']:.{digits}f} ± {stats['std']:.{digits}f} (n={stats['count']})"


def single_stream_table(results: Sequence[OfflineResult | LoadResult]) -> str:
    """The seed book's table, one row per engine (or sequential load test), latencies averaged
    over every request. tok/s: offline, per run (output tokens / run wall time); online, per
    request (output tokens / end-to-end latency); mean ± sd over n."""
    rows = []
    for r in results:
        s = r.summary()
        if isinstance(r, LoadResult):
            label, tps = f"{r.mode['model']} @ {r.url}", s["request_tokens_per_second"]
        else:
            label, tps = r.label, s["run_tokens_per_second"]
        e2e = _mean(s, "e2e_ms")
        rows.append([
            label,
            _fmt(_mean(s, "output_tokens_per_request"), 0),
            _fmt(e2e / 1000 if e2e is not None else None, 2),
            _spread(tps),
            _fmt(_mean(s, "ttft_ms")),
            _fmt(_mean(s, "tpot_ms")),
        ])
    return format_table(["engine", "tokens", "time (s)", "tok/s", "TTFT (ms)", "TPOT (ms)"], rows)


def percentile_table(summary: dict[str, Any]) -> str:
    """mean / p50 / p90 / p99 of each latency, with its sample count."""
    rows = []
    for key, label in (("e2e_ms", "E2E (ms)"), ("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"),
                       ("itl_ms", "ITL (ms)")):
        st = summary[key]
        if st.get("count"):
            rows.append([label, st["count"], st["mean"], st["p50"], st["p90"], st["p99"]])
    return format_table(["latency", "n", "mean", "p50", "p90", "p99"], rows)


def comparison_table(comparison: Comparison) -> str:
    """One row per engine: throughput, latencies, speed-up over engine 0 (mean and [min, max] of
    the per-round ratios), peak memory, and whether its tokens equal engine 0's."""
    rows = []
    for i, r in enumerate(comparison.results):
        s = r.summary()
        sp = comparison.speedup(i)
        peak = s["peak_memory_bytes"]
        rows.append([
            r.label,
            _spread(s["run_tokens_per_second"]),
            _fmt(_mean(s, "ttft_ms")),
            _fmt(_mean(s, "tpot_ms")),
            f"{sp['mean']:.2f}x [{sp['min']:.2f}, {sp['max']:.2f}]" if sp.get("count") else "-",
            f"{peak / 2**20:,.0f}" if peak else "-",
            "yes" if comparison.same_tokens(i) else "NO",
        ])
    ref = comparison.results[0].label
    return format_table(
        ["engine", "tok/s", "TTFT (ms)", "TPOT (ms)", f"speed-up vs {ref}", "peak MiB",
         f"tokens = {ref}"],
        rows,
    )


def serve_table(result: LoadResult) -> str:
    """The load table, laid out like `vllm bench serve` prints it."""
    s = result.summary()
    width = 50

    def title(text: str, fill: str = "-") -> str:
        return f"{text:{fill}^{width}}"

    def row(label: str, value: Any, digits: int = 2) -> str:
        return f"{label:<40}{_fmt(value, digits):<10}"

    lines = [
        title(" Serving Benchmark Result ", "="),
        row("Load mode:", result.mode["name"]),
        row("Successful requests:", s["successful"]),
        row("Failed requests:", s["failed"]),
        row("Benchmark duration (s):", s["duration_s"]),
        row("Total input tokens:", s["input_tokens"]),
        row("Total generated tokens:", s["output_tokens"]),
        row("Request throughput (req/s):", s["request_throughput"]),
        row("Output token throughput (tok/s):", s["output_throughput"]),
        row("Total token throughput (tok/s):", s["total_token_throughput"]),
    ]
    for key, name, heading in (
        ("ttft_ms", "TTFT", "Time to First Token"),
        ("tpot_ms", "TPOT", "Time per Output Token (excl. 1st token)"),
        ("itl_ms", "ITL", "Inter-token Latency"),
        ("e2e_ms", "E2EL", "End-to-end Latency"),
    ):
        st = s[key]
        lines.append(title(f" {heading} ") if len(heading) < width - 2 else heading)
        lines += [row(f"Mean {name} (ms):", st.get("mean")),
                  row(f"Median {name} (ms):", st.get("p50")),
                  row(f"P99 {name} (ms):", st.get("p99"))]
    lines.append("=" * width)
    return "\n".join(lines)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, title: str = "") -> Path:
    """Title (small, on top), tight layout, a 120-dpi PNG at `path`; the figure is closed."""
    plt = _pyplot()
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_offline(results: Sequence[OfflineResult], path: str | Path, title: str = "") -> Path:
    """Left: time of each output token by position (TTFT at 0, then each gap), mean over requests,
    one line per engine. Right: tokens/s per engine, a dot per run."""
    plt = _pyplot()
    fig, (ax_step, ax_tps) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        steps: dict[int, list[float]] = {}
        for rec in r.records:
            for pos, ms in enumerate([rec.ttft_ms or 0.0, *rec.itl_ms]):
                steps.setdefault(pos, []).append(ms)
        xs = sorted(steps)
        ax_step.plot(xs, [sum(steps[x]) / len(steps[x]) for x in xs], marker=".", label=r.label)
    ax_step.set(xlabel="output token position", ylabel="ms (position 0 = TTFT)",
                title="time per output token (mean over requests)")
    ax_step.set_ylim(bottom=0)
    ax_step.legend()
    for i, r in enumerate(results):
        tps = r.tokens_per_second
        ax_tps.scatter([i] * len(tps), tps, color=f"C{i}", zorder=3)
        ax_tps.bar(i, sum(tps) / len(tps), color=f"C{i}", alpha=0.4)
    ax_tps.set_xticks(range(len(results)), [r.label for r in results], rotation=20)
    ax_tps.set(ylabel="output tokens/s (dots: runs)", title="throughput")
    return save_figure(fig, path, title)


def plot_load(results: Sequence[LoadResult], path: str | Path, title: str = "") -> Path:
    """Cumulative distributions of TTFT, ITL and end-to-end latency, one line per load mode."""
    plt = _pyplot()
    from matplotlib import ticker

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for result in results:
        ok = [r for r in result.records if r.ok]
        samples = {
            "TTFT (ms)": [r.ttft_ms for r in ok if r.ttft_ms is not None],
            "ITL (ms)": [x for r in ok for x in r.itl_ms],
            "E2E latency (ms)": [r.e2e_ms for r in ok],
        }
        for ax, (label, values) in zip(axes, samples.items()):
            values = sorted(values)
            if values:
                n = len(values)
                ax.step([values[0], *values], [0.0, *((i + 1) / n for i in range(n))], where="post",
                        label=result.mode["name"])
            ax.set(xlabel=label, ylabel="fraction of samples", xscale="log")
            ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    axes[0].legend(fontsize=8)
    return save_figure(fig, path, title)
