"""04 — the engine: chapter 2's loop over the hand-written model.

`ModelEngine` (engine.py) subclasses chapter 2's `GenerateLoopEngine` and overrides one method,
`forward(input_ids) -> logits`, to call our `Llama` with `NoCacheAttention` instead of the Hugging
Face model. The loop, samplers, stop strings, streaming and metrics are chapter 2's.

The proof: the same tokens as chapter 2 on several prompts, greedy and sampled with a seed (same
logits to ~1e-5, same sampler, same seeds: the same draws). Then the provenance of two results with
identical tokens: the model manifest is the same, the record of which code ran is not.
Writes results/cpu/ch03_engine.json.

Run it:  python 04_engine.py
         python 04_engine.py --max-tokens 32 --threads 1
"""


import torch

from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from chapters.ch03_model.engine import ModelEngine
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--max-tokens", type=int, default=16)
args, started = parse_script(parser)

PROMPTS = [config.PROMPT, "The capital of France is", "def fibonacci(n):", "Bees make honey because"]
loaded = load_model(args.model)  # loaded once; our engine takes its weights over by name
ours, theirs = ModelEngine(loaded), GenerateLoopEngine(loaded)

# ---- 1. streaming: the events of one request ---------------------------------------------------
print("stream():", end=" ")
for event in ours.stream(ours.encode(PROMPTS[1]), SamplingParams(temperature=0.0, max_tokens=12)):
    print(repr(event.text), end=" ", flush=True)
print(f"\n  finish_reason={event.finish_reason}")

# ---- 2. the proof: chapter 2's tokens, greedy and sampled ---------------------------------------
settings = {
    "greedy": SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True),
    "sampled": SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=1234,
                              max_tokens=args.max_tokens, ignore_eos=True),
}
rows = []
print(f"\n{'setting':<8} {'prompt':<28} {'same as ch02':>12}  forward ms (ours / ch02)  text")
for setting, params in settings.items():
    for prompt, a, b in zip(PROMPTS, ours.generate_batch(PROMPTS, params), theirs.generate_batch(PROMPTS, params)):
        same = a.output_ids == b.output_ids
        rows.append({"setting": setting, "prompt": prompt, "same_tokens_as_ch02": same,
                     "output_ids": a.output_ids, "ch02_output_ids": b.output_ids, "text": a.text,
                     "metrics": a.metrics.as_dict(), "ch02_metrics": b.metrics.as_dict()})
        print(f"{setting:<8} {prompt[:28]!r:<28} {'yes' if same else 'NO':>12}  "
              f"{a.metrics.forward_ms:9.0f} / {b.metrics.forward_ms:<9.0f}     {a.text[:40]!r}")
same_all = all(r["same_tokens_as_ch02"] for r in rows)
print(f"all {len(rows)} requests identical to chapter 2: {same_all}")
print("(forward times from one pass each on a shared machine: 06_benchmark_offline.py measures properly)")

# ---- 3. provenance: identical outputs, distinct records -----------------------------------------
a, b = ours.provenance(), theirs.provenance()
print(f"\n{'provenance':<18} {'ch03':<36} ch02")
for key in ("engine", "implementation", "sampler", "device", "dtype", "manifest_sha256"):
    mark = "" if a[key] == b[key] else "   <- differs"
    print(f"{key:<18} {str(a[key])[:34]:<36} {str(b[key])[:34]}{mark}")

body = {
    "threads": torch.get_num_threads(),
    "settings": {k: vars(v) for k, v in settings.items()},
    "all_same_tokens_as_ch02": same_all,
    "requests": rows,
    "provenance": {"ch03": {k: v for k, v in a.items() if k != "model_manifest"},
                   "ch02": {k: v for k, v in b.items() if k != "model_manifest"}},
}
path = save_results("ch03_engine", body, device=a["device"], notes=args.notes, started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
