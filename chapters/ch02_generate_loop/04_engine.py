"""04 — the engine: chapter 2's loop behind the same contracts as chapter 1, and the proof.

`GenerateLoopEngine` (engine.py) subclasses chapter 1's `BaselineEngine` and replaces the one
method that made tokens, `_generate_tokens`, with our own loop. Streaming, stop strings, UTF-8-safe
text, cancellation and `generate_batch` come unchanged from the base class.

The proof: greedy decoding must give exactly chapter 1's tokens, on every prompt (several requests,
one `generate_batch` call each). Then what the new loop can measure that `generate()` could not:
TTFT and TPOT, the time split into forward, selection and other, and the positions processed,
which without a cache are far more than the tokens made. Writes results/cpu/ch02_engine.json.

Run it:  python 04_engine.py                       (about a minute on a 2-core CPU)
         python 04_engine.py --max-tokens 16 --threads 1
"""


import torch

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--max-tokens", type=int, default=32)
args, started = parse_script(parser)

PROMPTS = [config.PROMPT, "The capital of France is", "def fibonacci(n):", "Bees make honey because"]
loaded = load_model(args.model)  # loaded once, shared by both engines
ours, theirs = GenerateLoopEngine(loaded), BaselineEngine(loaded)
greedy = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)

# ---- 1. streaming: the events of one request ---------------------------------------------------
print("stream():", end=" ")
for event in ours.stream(ours.encode(PROMPTS[1]), SamplingParams(temperature=0.0, max_tokens=12)):
    print(repr(event.text), end=" ", flush=True)
print(f"\n  finish_reason={event.finish_reason}")

# ---- 2. the proof: greedy tokens identical to chapter 1 ----------------------------------------
a = ours.generate_batch(PROMPTS, greedy)
b = theirs.generate_batch(PROMPTS, greedy)
rows = []
print(f"\n{'prompt':28s} {'in':>3s} {'out':>4s} {'positions':>9s} {'factor':>6s} {'TTFT ms':>8s} "
      f"{'TPOT ms':>8s} {'same as ch01':>12s}")
for prompt, r, base in zip(PROMPTS, a, b):
    m = r.metrics
    same = r.output_ids == base.output_ids
    rows.append({"prompt": prompt, "same_tokens_as_ch01": same, "output_ids": r.output_ids,
                 "ch01_output_ids": base.output_ids, "text": r.text, "metrics": m.as_dict(),
                 "positions_per_output_token": m.positions_processed / m.output_tokens,
                 "ch01_metrics": base.metrics.as_dict()})
    print(f"{prompt[:28]:28s} {m.input_tokens:3d} {m.output_tokens:4d} {m.positions_processed:9d} "
          f"{m.positions_processed / m.output_tokens:6.1f} {m.ttft_ms:8.0f} {m.tpot_ms:8.0f} "
          f"{'yes' if same else 'NO':>12s}")

# ---- 3. where the time went ----------------------------------------------------------------------
forward = sum(r.metrics.forward_ms for r in a)
selection = sum(r.metrics.selection_ms for r in a)
other = sum(r.metrics.other_ms for r in a)
total = sum(r.metrics.total_ms for r in a)
print(f"\ntime: forward {forward / total:.1%}, selection {selection / total:.2%}, other "
      f"{other / total:.2%} of {total / 1000:.1f} s (the parts sum to the total by construction)")
print(f"ch01 generate(): {sum(r.metrics.total_ms for r in b) / 1000:.1f} s for the same tokens")

body = {
    "threads": torch.get_num_threads(),
    "params": vars(greedy),
    "all_same_tokens_as_ch01": all(r["same_tokens_as_ch01"] for r in rows),
    "requests": rows,
    "time_split": {"forward_ms": forward, "selection_ms": selection, "other_ms": other, "total_ms": total},
    "ch01_total_ms": sum(r.metrics.total_ms for r in b),
    "engine": ours.provenance(),
    "reference_engine": theirs.provenance()["engine"],
}
path = save_results("ch02_engine", body, device=str(ours.device), notes=args.notes, started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"wrote {path}")
if not body["all_same_tokens_as_ch01"]:
    raise SystemExit("FAIL: chapter 2's greedy tokens differ from chapter 1's")
