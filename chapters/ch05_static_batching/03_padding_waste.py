"""03 — padding waste: positions computed that nobody asked for.

A static batch computes a full rectangle. Two things in it serve no request:

* left padding in the prefill: every row is as long as the batch's longest prompt;
* finished rows in the decode steps: a row that reached EOS or its max_tokens rides along until the
  batch's last row finishes, computed and thrown away (the engine feeds it as padding).

This file serves the same 16 chat requests (prompts of about 30 to 90 tokens, the chat template
included; max_tokens between 4 and 32, greedy, stopping at EOS) in batches of 4 and of 16, the
requests taken in arrival order or sorted by prompt length first, and counts from the engine's `BatchStats` the positions computed,
the positions needed (prompt tokens, plus one per decode step of a live row), and the two kinds of
waste. Batch 1 wastes nothing by construction. With 16 requests, batch 16 is one batch whatever
the order: its two runs do the same work, so their wall times show the machine's noise.

Hypothesis: waste grows with batch size (a bigger rectangle is more likely to hold one long prompt
and one long answer), and sorting by length cuts the padding part but not the finished-rows part
(prompt length says nothing about answer length). Falsified if sorting left the padding unchanged
or the waste did not grow with batch size.

Writes results/cpu/ch05_padding_waste.json (results/gpu/ on a GPU).

Run it:  python 03_padding_waste.py      (a few minutes on a 2-core CPU)
"""

import random
import time

import torch

from chapters.ch05_static_batching.engine import BatchStats, StaticBatchEngine
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.benchmark.report import format_table
from shared.contracts import SamplingParams

parser = script_parser(__doc__)
parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 16])
args, started = parse_script(parser)

engine = StaticBatchEngine(args.model)
QUESTIONS = [
    "Hi", "What is 2 + 2?", "Name a fruit.", "Say hello in French.",
    "What is the capital of Italy?", "Why do cats purr?", "Give me a word that rhymes with cat.",
    "What colour is the sky on a clear day, and why does it look that way to us?",
    "Summarise the plot of Romeo and Juliet in one sentence for a student who has not read it.",
    "List three animals that live in the ocean and say one interesting fact about each of them.",
    "I am planning a trip to Japan in spring. Which three cities should I visit first, and what "
    "is one thing I should not miss in each of them? Please keep the answer short.",
    "Translate into Spanish: The weather is nice today and I would like to go for a walk.",
    "Write a haiku about autumn leaves falling in a quiet park.",
    "My laptop is slow when I open many browser tabs. I have eight gigabytes of memory and an old "
    "hard disk. What are the two most useful things I could change to make it faster, and why "
    "would each of them help? Answer briefly, in plain words, without brand names.",
    "What is the boiling point of water at sea level?",
    "Explain what a neural network is to someone who has never programmed.",
]
rng = random.Random(0)
requests = [(engine.apply_chat_template([{"role": "user", "content": q}]),
             SamplingParams(temperature=0.0, max_tokens=rng.randint(4, 32))) for q in QUESTIONS]
rng.shuffle(requests)  # arrival order: lengths mixed
engine.generate_batch([requests[0][0]], requests[0][1])  # warm-up, discarded


def serve(order: list[tuple[list[int], SamplingParams]], size: int) -> dict[str, float]:
    totals = {"positions_computed": 0, "positions_needed": 0, "padding": 0, "finished_rows": 0,
              "forward_passes": 0, "batches": 0}
    start = time.perf_counter()
    for i in range(0, len(order), size):
        chunk = order[i : i + size]
        stats = BatchStats()
        for _ in engine.stream_batch([p for p, _ in chunk], [sp for _, sp in chunk], stats=stats):
            pass
        padding = stats.rows * stats.prefill_width - sum(len(p) for p, _ in chunk)
        totals["positions_computed"] += stats.positions_computed
        totals["positions_needed"] += stats.positions_needed
        totals["padding"] += padding
        totals["finished_rows"] += stats.positions_wasted - padding
        totals["forward_passes"] += stats.forward_passes
        totals["batches"] += 1
    totals["wall_s"] = time.perf_counter() - start
    totals["wasted_fraction"] = 1 - totals["positions_needed"] / totals["positions_computed"]
    return totals


configs = []
for size in args.batch_sizes:
    for order_name, order in [("arrival", requests),
                              ("sorted by prompt length", sorted(requests, key=lambda r: len(r[0])))]:
        result = serve(order, size)
        configs.append({"batch_size": size, "order": order_name, **result})
        print(f"batch {size:2d}, {order_name}: {result['wasted_fraction']:.0%} wasted", flush=True)

print()
print(format_table(
    ["batch", "order", "computed", "needed", "wasted", "padding", "finished rows", "wall s"],
    [[c["batch_size"], c["order"], c["positions_computed"], c["positions_needed"],
      f"{c['wasted_fraction']:.0%}", c["padding"], c["finished_rows"], f"{c['wall_s']:.1f}"]
     for c in configs]))

body = {
    "requests": [{"prompt_tokens": len(p), "max_tokens": sp.max_tokens} for p, sp in requests],
    "configs": configs,
    "threads": torch.get_num_threads(),
    "engine": engine.provenance(),
}
prov = engine.provenance()
path = save_results("ch05_padding_waste", body, device=prov["device"], notes=args.notes,
                    started=started,
                    model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})
print(f"\nwrote {path}")
