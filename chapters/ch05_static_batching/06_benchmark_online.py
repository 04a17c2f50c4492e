"""Chapter 5's online benchmark: the head-of-line cost, over HTTP, under Poisson arrivals.

Two servers, each launched with uvicorn on a free port and stopped afterwards, receive the same
requests at the same seeded Poisson arrival times (--rate, requests per second; default 0.5 and 1
on a CPU, 2 and 8 where a GPU is present, so that requests queue on both machines):

* chapter 4's server (chapters/ch04_kv_cache/05_server.py): one request at a time;
* chapter 5's server (05_server.py here): the request batcher, IFS_MAX_BATCH (--max-batch) rows,
  gathered for IFS_MAX_WAIT_MS (--max-wait-ms).

Each request streams; the client times TTFT (queueing included), ITL and end-to-end latency. The
script prints a `vllm bench serve` table per server and rate, then the comparison that matters
here: TTFT percentiles side by side, and how much of each TTFT was spent before the engine started
on the request (the client's TTFT minus the engine's own, from the response's metrics). One at a
time, a request waits for every request ahead of it; batched, it waits for the batch running when
it arrived (a static batch admits nobody once it has started) and then shares the machine with its
batch. Writes results/cpu/ch05_online.json and a plot (results/gpu/ on a GPU, or --out / $OUT).

    python 06_benchmark_online.py --tokens 16 --num-requests 16
    python chapters/ch05_static_batching/06_benchmark_online.py --rate 0.5 1 2 --max-batch 16
"""

import argparse
from pathlib import Path
from typing import Any

import matplotlib
import torch

from shared.benchmark import launch_server, provenance, run_load, save_results, serve_table
from shared.benchmark.cli import online_args
from shared.benchmark.online import LoadResult, server_models
from shared.benchmark.report import format_table
from shared.stats import summarize

HERE = Path(__file__).resolve().parent
SERVERS = {
    "ch04_kv_cache (one at a time)": HERE.parent / "ch04_kv_cache",
    "ch05_static_batching (batcher)": HERE,
}

# The batcher's two options, taken out before the shared online options are parsed.
extra = argparse.ArgumentParser(add_help=False)
extra.add_argument("--max-batch", type=int, default=8)
extra.add_argument("--max-wait-ms", type=float, default=20.0)
known, rest = extra.parse_known_args()
args = online_args(__doc__ + "\nalso: --max-batch N (default 8), --max-wait-ms MS (default 20)", rest)
rates = args.rate or ([2.0, 8.0] if torch.cuda.is_available() else [0.5, 1.0])
missing = [str(folder / "05_server.py") for folder in SERVERS.values() if not (folder / "05_server.py").is_file()]
if missing:
    raise SystemExit(f"no server to launch: {', '.join(missing)} does not exist")
started = provenance(args.notes)

env = {"IFS_MAX_BATCH": str(known.max_batch), "IFS_MAX_WAIT_MS": str(known.max_wait_ms)}
if args.model:
    env["IFS_MODEL"] = args.model
if args.threads:
    env["OMP_NUM_THREADS"] = str(args.threads)


def before_engine(result: LoadResult) -> dict[str, float]:
    """Per request, the client's TTFT minus the engine's own (which starts when the engine starts
    on the request): the time spent before the engine took it, mostly waiting for the request or
    batch ahead of it. Summarised; HTTP and the batcher's gathering wait are in it too."""
    return summarize([r.ttft_ms - r.reported["ttft_ms"] for r in result.records
                      if r.ttft_ms is not None and "ttft_ms" in r.reported])


def plot_ttft(loads: dict[str, list[dict[str, Any]]], rates: list[float], path: Path) -> Path:
    """TTFT p50/p90/p99 per rate, the two servers side by side."""
    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rates), figsize=(4.5 * len(rates), 3.8), squeeze=False)
    for ax, (i, rate) in zip(axes[0], enumerate(rates)):
        for j, label in enumerate(loads):
            ttft = loads[label][i]["summary"]["ttft_ms"]
            values = [ttft.get(q, 0.0) / 1000 for q in ("p50", "p90", "p99")]
            ax.bar([x + 0.4 * j for x in range(3)], values, width=0.4, label=label)
        ax.set_xticks([x + 0.2 for x in range(3)], ["p50", "p90", "p99"])
        ax.set(title=f"Poisson {rate:g} req/s", ylabel="TTFT (s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=120)
    return path


loads: dict[str, list[dict[str, Any]]] = {}
cards: dict[str, dict[str, Any]] = {}
for label, folder in SERVERS.items():
    with launch_server("05_server:app", args.port, cwd=folder, env=env) as server:
        cards[label] = server_models(server.url)[0]
        loads[label] = []
        for rate in rates:
            result = run_load(server.url, args.prompts, args.params, args.num_requests, None, rate,
                              args.seed, cards[label]["id"], args.endpoint, args.warmup)
            print(f"{label}\n{serve_table(result)}\n", flush=True)
            loads[label].append({**result.as_dict(), "before_engine_ms": before_engine(result)})

rows = []
for i, rate in enumerate(rates):
    for label in SERVERS:
        s = loads[label][i]["summary"]
        wait = loads[label][i]["before_engine_ms"]
        rows.append([f"{rate:g}", label, f"{wait.get('p50', float('nan')):.0f}",
                     f"{wait.get('p90', float('nan')):.0f}", f"{s['ttft_ms'].get('p50', float('nan')):.0f}",
                     f"{s['ttft_ms'].get('p90', float('nan')):.0f}", f"{s['ttft_ms'].get('p99', float('nan')):.0f}",
                     f"{s['e2e_ms'].get('p50', float('nan')):.0f}", f"{s['output_throughput']:.1f}",
                     s["failed"]])
print(format_table(["req/s", "server", "wait p50 ms", "wait p90 ms", "TTFT p50 ms", "TTFT p90 ms",
                    "TTFT p99 ms", "E2E p50 ms", "out tok/s", "failed"], rows))

if not args.no_save:
    body = {"servers": {label: {"app_dir": str(folder.relative_to(HERE.parents[1])),
                                "model_card": cards[label]} for label, folder in SERVERS.items()},
            "batcher": {"max_batch": known.max_batch, "max_wait_ms": known.max_wait_ms},
            "workload": {"prompts": args.prompts, "params": vars(args.params), "rates": rates,
                         "num_requests": args.num_requests, "seed": args.seed, "warmup": args.warmup,
                         "order": "chapter 4's server first, then chapter 5's; one after the other"},
            "loads": loads}
    prov = next(iter(cards.values())).get("provenance", {})
    path = save_results(args.name or "ch05_online", body, device=prov.get("device"), notes=args.notes,
                        out_dir=args.out, started=started,
                        model={"manifest": prov.get("model_manifest"),
                               "manifest_sha256": prov.get("manifest_sha256")})
    plot = plot_ttft(loads, rates, path.with_suffix(".png"))
    print(f"\nwrote {path} and {plot}")
