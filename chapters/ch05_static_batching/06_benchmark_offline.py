"""Chapter 5's offline benchmark: the same requests one at a time (chapter 4) and in static batches.

--num-requests greedy requests (the prompts cycle; EOS ignored, so every request makes --tokens
tokens) are served two ways, in-process, alternately in each round (the order rotating, so a slow
spell of the shared machine lands on both):

* ch04_kv_cache: one after another through chapter 4's code (`generate`, which the chapter 5
  engine inherits unchanged);
* ch05_static_batching (batch B): in batches of --batch-sizes B through `generate_batch`.

It prints each way's output tokens per second, the speed-up over one at a time with its spread over
the rounds, and whether every request's tokens equal the one-at-a-time run's; and writes
results/cpu/ch05_offline.json (results/gpu/ on a GPU, or --out / $OUT).

    python 06_benchmark_offline.py --tokens 16
    python chapters/ch05_static_batching/06_benchmark_offline.py --tokens 256 --num-requests 32 --batch-sizes 8 32

TTFT here is per request from the start of its own call: one at a time, a request's wait for the
requests before it is not counted (that queueing is what 06_benchmark_online.py measures).
"""

import time
from typing import Any

from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared.benchmark import provenance, save_results
from shared.benchmark.cli import offline_parser, parse
from shared.benchmark.report import format_table
from shared.stats import summarize

p = offline_parser(__doc__)
p.add_argument("--num-requests", type=int, default=8, help="requests per run (default %(default)s)")
p.add_argument("--batch-sizes", type=int, nargs="+", default=[8],
               help="static batch sizes to measure (default %(default)s)")
args = parse(p)
if args.num_requests < 1 or min(args.batch_sizes) < 1:
    p.error("--num-requests and --batch-sizes must be >= 1")
started = provenance(args.notes)

engine = StaticBatchEngine(args.model)
prompts = [engine.encode(args.prompts[i % len(args.prompts)]) for i in range(args.num_requests)]
params = args.params


def one_at_a_time() -> tuple[list[list[int]], list[float]]:
    out, ttft = [], []
    for prompt in prompts:
        result = engine.generate(prompt, params)
        out.append(result.output_ids)
        ttft.append(result.metrics.ttft_ms)
    return out, ttft


def batched(size: int) -> tuple[list[list[int]], list[float]]:
    out, ttft = [], []
    for i in range(0, len(prompts), size):
        for result in engine.generate_batch(prompts[i : i + size], params):
            out.append(result.output_ids)
            ttft.append(result.metrics.ttft_ms)
    return out, ttft


ways: dict[str, Any] = {"ch04_kv_cache": one_at_a_time}
ways.update({f"ch05_static_batching (batch {b})": (lambda b=b: batched(b)) for b in args.batch_sizes})
labels = list(ways)
for _ in range(args.warmup):
    for way in ways.values():
        way()
runs: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
outputs: dict[str, list[list[int]]] = {}
for r in range(args.runs):
    order = labels[r % len(labels):] + labels[: r % len(labels)]
    for label in order:
        start = time.perf_counter()
        ids, ttft = ways[label]()
        wall = time.perf_counter() - start
        tokens = sum(len(x) for x in ids)
        runs[label].append({"run": r, "wall_s": wall, "output_tokens": tokens,
                            "tokens_per_second": tokens / wall, "ttft_ms": ttft})
        outputs.setdefault(label, ids)
        print(f"run {r + 1}/{args.runs} {label}: {tokens / wall:.1f} tok/s", flush=True)

reference = labels[0]
summary = []
for label in labels:
    tps = [x["tokens_per_second"] for x in runs[label]]
    ratios = [x["tokens_per_second"] / y["tokens_per_second"] for x, y in zip(runs[label], runs[reference])]
    summary.append({
        "label": label,
        "tokens_per_second": summarize(tps),
        "ttft_ms": summarize([t for x in runs[label] for t in x["ttft_ms"]]),
        "speedup_over_one_at_a_time": summarize(ratios),
        "same_tokens_as_one_at_a_time": outputs[label] == outputs[reference],
    })
print()
print(format_table(
    ["engine", "tok/s (mean)", "TTFT p50 ms", "x one at a time", "spread (min-max)", "same tokens"],
    [[s["label"], f"{s['tokens_per_second']['mean']:.1f}", f"{s['ttft_ms']['p50']:.0f}",
      f"{s['speedup_over_one_at_a_time']['mean']:.2f}",
      f"{s['speedup_over_one_at_a_time']['min']:.2f}-{s['speedup_over_one_at_a_time']['max']:.2f}",
      "yes" if s["same_tokens_as_one_at_a_time"] else "NO"] for s in summary]))

if not args.no_save:
    body = {
        "workload": {"prompts": args.prompts, "num_requests": args.num_requests,
                     "params": vars(params), "runs": args.runs, "warmup": args.warmup,
                     "order": "rotating (round r starts with way r mod n)"},
        "summary": summary,
        "runs": runs,
        "engine": engine.provenance(),
    }
    prov = engine.provenance()
    path = save_results(args.name or "ch05_offline", body, device=prov["device"], notes=args.notes,
                        out_dir=args.out, started=started,
                        model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})
    print(f"\nwrote {path}")
