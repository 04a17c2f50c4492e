"""01 — the batch engine: six requests in one batch, each row equal to its solo run.

Six chat requests of different lengths, with different SamplingParams (four greedy with different
max_tokens, two sampled with their own seeds), go through `generate_batch` as one padded batch.
Each is then run alone through chapter 4's code (`generate`, inherited unchanged), and the table
compares them row by row: tokens, text, finish reason, and the time each took.

What to notice:

* every row equals its solo run (greedy rows token for token; sampled rows too, because each row
  draws from `derive_seed(its seed, step)`, whatever else is in the batch);
* rows finish at different steps (their own max_tokens or EOS) while the batch runs on: the
  batch's time is its longest row's;
* the batch took less time than the six solo runs one after another, though on this CPU by far
  less than six-fold (02_throughput.py measures why).

Writes results/cpu/ch05_batch_engine.json (results/gpu/ on a GPU).

Run it:  python 01_batch_engine.py        (about a minute on a 2-core CPU)
"""

import time

import torch

from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.benchmark.report import format_table
from shared.contracts import SamplingParams

parser = script_parser(__doc__)
args, started = parse_script(parser)

engine = StaticBatchEngine(args.model)
questions = [
    "Hi!",
    "What is the capital of France?",
    "Write one sentence about bees.",
    "Explain in two sentences why the sky is blue, for a ten-year-old who likes football.",
    "Name a colour.",
    "Tell me a very short story about a robot that learns to bake bread.",
]
params = [
    SamplingParams(temperature=0.0, max_tokens=8),
    SamplingParams(temperature=0.0, max_tokens=24),
    SamplingParams(temperature=0.0, max_tokens=16),
    SamplingParams(temperature=0.0, max_tokens=32),
    SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seed=1),
    SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seed=2),
]
prompts = [engine.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
engine.generate_batch(prompts[:2], params[:2])  # warm-up, discarded

start = time.perf_counter()
batch = engine.generate_batch(prompts, params)
batch_s = time.perf_counter() - start
solo, solo_s = [], []
for prompt, sp in zip(prompts, params):
    start = time.perf_counter()
    solo.append(engine.generate(prompt, sp))
    solo_s.append(time.perf_counter() - start)

rows = []
for i, (q, sp, b, s) in enumerate(zip(questions, params, batch, solo)):
    rows.append({
        "question": q, "params": vars(sp), "prompt_tokens": len(prompts[i]),
        "padding_positions": b.metrics.extra.get("padding_positions", 0),
        "output_tokens": len(b.output_ids), "finish_reason": b.finish_reason,
        "same_tokens_as_solo": b.output_ids == s.output_ids, "same_text_as_solo": b.text == s.text,
        "same_finish_as_solo": b.finish_reason == s.finish_reason,
        "batch_ttft_ms": b.metrics.ttft_ms, "solo_ttft_ms": s.metrics.ttft_ms,
        "text": b.text, "solo_s": solo_s[i],
    })
print(format_table(
    ["row", "sampling", "prompt", "padding", "out", "finish", "= solo", "TTFT batch ms", "TTFT solo ms"],
    [[i, "greedy" if sp.is_greedy else f"T={sp.temperature} seed={sp.seed}", r["prompt_tokens"],
      r["padding_positions"], r["output_tokens"], r["finish_reason"],
      "yes" if r["same_tokens_as_solo"] and r["same_text_as_solo"] and r["same_finish_as_solo"] else "NO",
      f"{r['batch_ttft_ms']:.0f}", f"{r['solo_ttft_ms']:.0f}"]
     for i, (sp, r) in enumerate(zip(params, rows))]))
print(f"\none batch: {batch_s:.2f} s; the same requests one after another: {sum(solo_s):.2f} s "
      f"({sum(solo_s) / batch_s:.2f}x)")
for i, r in enumerate(rows):
    print(f"  row {i}: {r['text']!r}")

body = {
    "rows": rows,
    "batch_s": batch_s,
    "solo_total_s": sum(solo_s),
    "all_rows_equal_solo": all(r["same_tokens_as_solo"] and r["same_text_as_solo"] for r in rows),
    "threads": torch.get_num_threads(),
    "engine": engine.provenance(),
}
prov = engine.provenance()
path = save_results("ch05_batch_engine", body, device=prov["device"], notes=args.notes, started=started,
                    model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})
print(f"\nwrote {path}")
