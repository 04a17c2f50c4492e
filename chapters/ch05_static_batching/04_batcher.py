"""04 — the request batcher: how long to wait for company.

The server's `BatchingRunner` (batcher.py) takes the first waiting request, waits up to
`max_wait_ms` for more to arrive, and runs up to `max_batch` of them as one static batch. This file
drives it in-process (no HTTP: the runner is what the server calls), with the same requests
arriving at the same Poisson times (seeded) under four settings:

* max_batch 1: one request at a time, as chapters 1–4 serve;
* max_batch 8 with max_wait_ms 0, 100 and 400: batch whatever is waiting, or wait for company.

For every request it records the time to first token (TTFT, from submission, so queueing counts),
its end-to-end time and the size of the batch it rode in; for every setting, the batches served
and the wall time until the last request finished.

What to notice: a batch is static, so a request that arrives while one runs waits for all of it
(head-of-line blocking) before its own batch can start; a longer max_wait_ms makes batches larger
and costs the first request of each batch exactly that wait. 06_benchmark_online.py measures the
same trade over HTTP against chapter 4's server.

Writes results/cpu/ch05_batcher.json (results/gpu/ on a GPU).

Run it:  python 04_batcher.py      (a few minutes on a 2-core CPU)
         python 04_batcher.py --rate 2 --num-requests 16 --tokens 8
"""

import asyncio
import time
from typing import Any

import torch

from chapters.ch05_static_batching.batcher import BatchingRunner
from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.benchmark.online import arrival_times
from shared.benchmark.report import format_table
from shared.contracts import SamplingParams
from shared.stats import summarize

parser = script_parser(__doc__)
parser.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals per second (default %(default)s)")
parser.add_argument("--num-requests", type=int, default=12)
parser.add_argument("--tokens", type=int, default=8, help="new tokens per request (default %(default)s)")
parser.add_argument("--seed", type=int, default=0, help="seed of the arrival times")
args, started = parse_script(parser)

engine = StaticBatchEngine(args.model)
prompt = engine.encode(config.PROMPT)
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
engine.generate_batch([prompt, prompt], params)  # warm-up, discarded
arrivals = arrival_times(args.num_requests, args.rate, args.seed)
SETTINGS = [(1, 0.0), (8, 0.0), (8, 100.0), (8, 400.0)]


async def one_request(runner: BatchingRunner, at: float, t0: float) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
    sent = time.perf_counter()
    first = None
    async for event in runner.submit(prompt, params):
        if first is None and event.token_id is not None:
            first = time.perf_counter()
        if event.finish_reason is not None:
            return {"arrival_s": at, "ttft_ms": ((first or time.perf_counter()) - sent) * 1000,
                    "e2e_ms": (time.perf_counter() - sent) * 1000,
                    "batch_size": event.metrics.extra.get("batch_size", 1),
                    "output_tokens": event.metrics.output_tokens}
    raise AssertionError("stream ended without a final event")


async def serve(max_batch: int, max_wait_ms: float) -> dict[str, Any]:
    runner = BatchingRunner(engine, max_batch=max_batch, max_wait_ms=max_wait_ms)
    t0 = time.perf_counter()
    requests = await asyncio.gather(*(one_request(runner, at, t0) for at in arrivals))
    wall = time.perf_counter() - t0
    stats = runner.stats()
    await runner.aclose()
    return {"max_batch": max_batch, "max_wait_ms": max_wait_ms, "wall_s": wall,
            "batches": stats["batches"], "batch_size_max": stats["batch_size_max"],
            "mean_batch_size": args.num_requests / stats["batches"],
            "ttft_ms": summarize([r["ttft_ms"] for r in requests]),
            "e2e_ms": summarize([r["e2e_ms"] for r in requests]),
            "output_tokens_per_second": sum(r["output_tokens"] for r in requests) / wall,
            "requests": requests}


results = []
for max_batch, max_wait_ms in SETTINGS:
    results.append(asyncio.run(serve(max_batch, max_wait_ms)))
    print(f"max_batch {max_batch}, max_wait_ms {max_wait_ms:g}: done", flush=True)

print(f"\n{args.num_requests} requests, Poisson {args.rate:g}/s (seed {args.seed}), "
      f"{len(prompt)}-token prompt, {args.tokens} new tokens each")
print(format_table(
    ["max_batch", "max_wait_ms", "batches", "mean batch", "TTFT p50 ms", "TTFT p90 ms",
     "E2E p50 ms", "tok/s", "wall s"],
    [[r["max_batch"], f"{r['max_wait_ms']:g}", r["batches"], f"{r['mean_batch_size']:.1f}",
      f"{r['ttft_ms']['p50']:.0f}", f"{r['ttft_ms']['p90']:.0f}", f"{r['e2e_ms']['p50']:.0f}",
      f"{r['output_tokens_per_second']:.1f}", f"{r['wall_s']:.1f}"] for r in results]))

body = {
    "workload": {"prompt": config.PROMPT, "prompt_tokens": len(prompt), "params": vars(params),
                 "rate": args.rate, "num_requests": args.num_requests, "seed": args.seed,
                 "arrivals_s": arrivals},
    "settings": results,
    "threads": torch.get_num_threads(),
    "engine": engine.provenance(),
}
prov = engine.provenance()
path = save_results("ch05_batcher", body, device=prov["device"], notes=args.notes, started=started,
                    model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})
print(f"\nwrote {path}")
