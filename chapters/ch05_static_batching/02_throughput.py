"""02 — throughput against batch size: what one more row costs.

A decode step of batch 1 multiplies each weight matrix by one vector: it reads every weight once
to do one multiply-add per weight. A batch of B reads the same weights once for B vectors. Where
reading weights is the bottleneck (a GPU, at small batch), B rows cost about what one does, and
throughput grows almost B-fold. Where arithmetic is the bottleneck, each row costs its own
multiply-adds and batching buys little.

This file runs the same prompt as one batch of B identical rows (no padding, so only B varies) for
B = 1 … 64, greedy, EOS ignored, --tokens new tokens per row, and measures the prefill (time to the
first token), the mean decode step, and output tokens per second. The sizes run in a shuffled order
each round (the machine is shared: a slow spell should land on all of them alike). The reference is
chapter 4's code serving the same request alone (`generate`, which this engine inherits), and every
row's tokens are checked against it.

Hypothesis, on this CPU: a decode step costs far less than B times batch 1's at small B (the
per-step overhead and the weight reads are shared) but, float32 matrix products being mostly
arithmetic-bound on two cores, throughput flattens well before B = 64. Falsified if throughput
grew in proportion to B all the way, or not at all.

Writes results/cpu/ch05_throughput.json and .png (results/gpu/ on a GPU).

Run it:  python 02_throughput.py                      (a few minutes on a 2-core CPU)
         python 02_throughput.py --tokens 32 --batch-sizes 1 4 16 --rounds 3 --threads 1
"""

import random
import statistics
import time

import matplotlib
import torch

from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.benchmark.report import format_table
from shared.contracts import SamplingParams

parser = script_parser(__doc__)
parser.add_argument("--prompt", default=config.PROMPT)
parser.add_argument("--tokens", type=int, default=16, help="new tokens per row (default %(default)s)")
parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
parser.add_argument("--rounds", type=int, default=2, help="rounds over all sizes (default %(default)s)")
parser.add_argument("--out", default=None, help="results folder (default: $OUT or results/cpu|gpu)")
args, started = parse_script(parser)
if args.tokens < 2 or min(args.batch_sizes) < 1 or args.rounds < 1:
    parser.error("--tokens must be >= 2 (a decode step is measured), batch sizes and --rounds >= 1")

engine = StaticBatchEngine(args.model)
prompt = engine.encode(args.prompt)
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
reference = engine.generate(prompt, params)  # chapter 4's code, one request; also the warm-up
engine.generate_batch([prompt] * 2, params)  # warm-up of the batched path


def sync() -> None:
    if engine.device.type == "cuda":
        torch.cuda.synchronize()


def run_batch(size: int) -> dict[str, float]:
    """One batch of `size` identical rows: prefill ms, mean decode step ms, tokens/s; rows checked."""
    rows: list[list[int]] = [[] for _ in range(size)]
    sync()
    start = time.perf_counter()
    first = 0.0
    for k, step in enumerate(engine.stream_batch([prompt] * size, [params] * size)):
        for row, event in zip(rows, step):
            if event is not None and event.token_id is not None:
                row.append(event.token_id)
        if k == 0:
            sync()
            first = time.perf_counter()
    sync()
    end = time.perf_counter()
    tokens = sum(len(r) for r in rows)
    return {"wall_s": end - start, "prefill_ms": (first - start) * 1000,
            "decode_step_ms": (end - first) * 1000 / (args.tokens - 1),
            "output_tokens": tokens, "tokens_per_second": tokens / (end - start),
            "rows_differing_from_alone": sum(row != reference.output_ids for row in rows)}


def run_alone() -> dict[str, float]:
    sync()
    start = time.perf_counter()
    out = engine.generate(prompt, params)
    sync()
    wall = time.perf_counter() - start
    return {"wall_s": wall, "output_tokens": len(out.output_ids),
            "tokens_per_second": len(out.output_ids) / wall}


runs: dict[int, list[dict[str, float]]] = {b: [] for b in args.batch_sizes}
alone: list[dict[str, float]] = []
rng = random.Random(0)
for r in range(args.rounds):
    order = list(args.batch_sizes)
    rng.shuffle(order)
    alone.append(run_alone())
    for size in order:
        runs[size].append(run_batch(size))
        print(f"round {r + 1}/{args.rounds}: batch {size:3d} {runs[size][-1]['tokens_per_second']:8.1f} tok/s",
              flush=True)


def med(values: list[dict[str, float]], key: str) -> float:
    return statistics.median(v[key] for v in values)


alone_tps = med(alone, "tokens_per_second")
table = []
for size in args.batch_sizes:
    tps = med(runs[size], "tokens_per_second")
    table.append({
        "batch_size": size,
        "tokens_per_second": tps,
        "tokens_per_second_runs": [v["tokens_per_second"] for v in runs[size]],
        "per_request_tokens_per_second": tps / size,
        "prefill_ms": med(runs[size], "prefill_ms"),
        "decode_step_ms": med(runs[size], "decode_step_ms"),
        "speedup_over_alone": tps / alone_tps,
        "rows_differing_from_alone": sum(v["rows_differing_from_alone"] for v in runs[size]),
    })
step1 = next((t["decode_step_ms"] for t in table if t["batch_size"] == 1), None)
print()
print(format_table(
    ["batch", "tok/s", "x alone", "tok/s per request", "prefill ms", "decode step ms"]
    + (["step / batch-1 step"] if step1 else []),
    [[t["batch_size"], f"{t['tokens_per_second']:.1f}", f"{t['speedup_over_alone']:.2f}",
      f"{t['per_request_tokens_per_second']:.1f}", f"{t['prefill_ms']:.0f}", f"{t['decode_step_ms']:.1f}"]
     + ([f"{t['decode_step_ms'] / step1:.2f}"] if step1 else []) for t in table]))
print(f"chapter 4's code, one request alone: {alone_tps:.1f} tok/s (median of {len(alone)})")
differing = sum(t["rows_differing_from_alone"] for t in table)
print(f"rows whose tokens differ from the request run alone: {differing}"
      + ("" if not differing else "  <- a bug, or a near-tie flipped by rounding: see tests/test_ch05_engine.py"))

body = {
    "prompt": args.prompt,
    "prompt_tokens": len(prompt),
    "params": vars(params),
    "rounds": args.rounds,
    "order": "batch sizes shuffled per round; one request alone at the start of each round",
    "threads": torch.get_num_threads(),
    "alone": {"tokens_per_second": alone_tps, "runs": alone},
    "batches": table,
    "runs": {str(b): v for b, v in runs.items()},
    "rows_differing_from_alone": differing,
    "engine": engine.provenance(),
}
prov = engine.provenance()
path = save_results("ch05_throughput", body, device=prov["device"], notes=args.notes, started=started,
                    out_dir=args.out,
                    model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})

matplotlib.use("Agg")  # a file, no display
import matplotlib.pyplot as plt  # noqa: E402

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
sizes = [t["batch_size"] for t in table]
left.plot(sizes, [t["tokens_per_second"] for t in table], "o-", label="static batch")
left.axhline(alone_tps, color="grey", linestyle="--", label="one request alone (ch04)")
left.set(xscale="log", xlabel="batch size", ylabel="output tokens / s", title="throughput")
left.set_xticks(sizes, [str(s) for s in sizes])
left.legend()
right.plot(sizes, [t["decode_step_ms"] for t in table], "o-", label="measured")
if step1:
    right.plot(sizes, [step1 * s for s in sizes], ":", color="grey", label="batch 1 x B (no sharing)")
right.set(xscale="log", yscale="log", xlabel="batch size", ylabel="ms", title="one decode step")
right.set_xticks(sizes, [str(s) for s in sizes])
right.legend()
m = started["machine"]
fig.suptitle(f"ch05 throughput vs batch size: {m.get('gpu') or m['cpu']}, {args.tokens} new tokens, "
             f"prompt {len(prompt)} tokens", fontsize=9)
fig.tight_layout()
fig.savefig(path.with_suffix(".png"), dpi=120)
print(f"\nwrote {path} and {path.with_suffix('.png')}")
