"""03 — the oracle check: is the hand-written model the same function as the library's?

Two implementations of one architecture with the same weights should compute the same logits, up
to floating-point rounding (the sums run in a different order). "Up to rounding" needs a number:
this script reports, for several prompts, the largest absolute difference over every position and
every one of the 49,152 vocabulary entries, next to the size of the logits themselves. Then the
test that matters for generation: greedy continuations, all prompts in one left-padded batch of
our model (no cache: each step reruns everything), against Hugging Face `generate` one by one.

Hypothesis: max |diff| is below 1e-3 in float32 (logits are tens), and every greedy token is equal.
It would be falsified by a wrong detail (RoPE's pairing, the norm's epsilon, a head's grouping):
those give differences of order 1, not 1e-5.

Results go to results/cpu/ch03_oracle.json (results/gpu/ on a GPU, in bfloat16).

Run it:  python 03_oracle.py
         python 03_oracle.py --tokens 32
"""


import torch

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch03_model.model import from_hf
from chapters.ch03_model.oracle import compare_logits, greedy_tokens
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams
from shared.model import load_model

PROMPTS = [
    config.PROMPT,
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Water boils at a temperature of",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n<|im_start|>assistant\n",
]

parser = script_parser(__doc__)
parser.add_argument("--tokens", type=int, default=16, help="greedy tokens per prompt")
parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                    help="default: float32 on a CPU, bfloat16 on a GPU")
args, started = parse_script(parser)

loaded = load_model(args.model, dtype=getattr(torch, args.dtype) if args.dtype else None)
model = from_hf(loaded.model)
tok = loaded.tokenizer
prompts = [tok.encode(p) for p in PROMPTS]

# ---- logits -----------------------------------------------------------------------------------------
results = compare_logits(model, loaded.model, prompts, pad_id=loaded.eos_token_id)
print(f"logits, ours (one left-padded batch) vs transformers (one prompt at a time), {loaded.manifest['dtype']}")
print(f"  {'prompt':<34} {'tokens':>6} {'max |diff|':>11} {'max |logit|':>11} {'argmax equal':>13}")
for text, r in zip(PROMPTS, results):
    print(f"  {text[:32]!r:<34} {r.tokens:>6} {r.max_abs_diff:>11.2e} {r.max_abs_logit:>11.2f} "
          f"{r.argmax_agree:>13.0%}")
worst = max(r.max_abs_diff for r in results)
print(f"  worst max |diff| {worst:.2e}")

# Transformers' default attention is PyTorch's fused SDPA kernel; its "eager" attention is the same
# arithmetic as ours (scores, mask, float32 softmax, weighted sum). Against that, the rounding of
# every step is the same, and in bfloat16 any remaining difference would be a bug, not rounding.
default_attention = loaded.model.config._attn_implementation
loaded.model.set_attn_implementation("eager")
eager = compare_logits(model, loaded.model, prompts, pad_id=loaded.eos_token_id)
loaded.model.set_attn_implementation(default_attention)
worst_eager = max(r.max_abs_diff for r in eager)
print(f"  against transformers' eager attention instead of {default_attention!r}: worst max |diff| "
      f"{worst_eager:.2e}, top token equal at {min(r.argmax_agree for r in eager):.0%} of positions")

# ---- greedy tokens ----------------------------------------------------------------------------------
ours = greedy_tokens(model, prompts, args.tokens, pad_id=loaded.eos_token_id)
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
theirs = [r.output_ids for r in BaselineEngine(loaded).generate_batch(prompts, params)]
print(f"\ngreedy, {args.tokens} tokens per prompt: ours (all prompts in one batch) vs HF generate")
greedy = []
for text, a, b in zip(PROMPTS, ours, theirs):
    first_diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    greedy.append({"prompt": text, "ours": a, "hf_generate": b, "identical": a == b,
                   "first_difference": first_diff})
    print(f"  {'identical' if a == b else f'DIFFER at {first_diff}':<12} {text[:30]!r:<32} -> {tok.decode(a)!r}")
identical = sum(g["identical"] for g in greedy)
print(f"  {identical} of {len(greedy)} prompts identical")

record = {
    "prompts": PROMPTS,
    "dtype": loaded.manifest["dtype"],
    "logits": [dict(prompt=p, **r.as_dict()) for p, r in zip(PROMPTS, results)],
    "worst_max_abs_diff": worst,
    "reference_attention": default_attention,
    "worst_max_abs_diff_vs_eager_attention": worst_eager,
    "logits_vs_eager_attention": [dict(prompt=p, **r.as_dict()) for p, r in zip(PROMPTS, eager)],
    "greedy_tokens": args.tokens,
    "greedy": greedy,
    "greedy_identical": identical,
}
name = "ch03_oracle" if args.dtype is None else f"ch03_oracle_{args.dtype}"
path = save_results(name, record, device=loaded.manifest["device"], started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
