"""02 — how the next token is chosen: greedy, temperature, top-k, top-p.

At every step the model returns one score (a logit) per vocabulary entry. Greedy decoding takes the
highest; sampling draws from softmax(logits / temperature), optionally restricted to the k most
likely tokens (top-k) or to the smallest set whose probabilities add up to p (top-p, "nucleus").

The script first looks at a single step (the distribution after the prompt, and how each knob
reshapes it), then generates with each setting side by side. Every sampled row starts from the same
seed, so the table is the same on every run on the same machine, and rows differ only by the knob.
It writes both tables to results/cpu/ch01_sampling.json (results/gpu/ on a GPU; --no-save skips it).

Run it:  python 02_sampling.py
         python 02_sampling.py --prompt "Once upon a time" --max-tokens 30 --seed 7
"""

import argparse
from typing import Any

import torch

from shared.benchmark import provenance, save_results
from shared.config import PROMPT
from shared.model import load_model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--prompt", default=PROMPT)
parser.add_argument("--max-tokens", type=int, default=24)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--no-save", action="store_true", help="print only; write no results file")
args = parser.parse_args()

started = provenance()  # the machine's state when we began, for the results file
loaded = load_model()
tokenizer, model = loaded.tokenizer, loaded.model
inputs = tokenizer(args.prompt, return_tensors="pt").to(model.device)

# ---- one step: the distribution over the next token -----------------------------------------------
with torch.inference_mode():
    logits = model(**inputs).logits[0, -1].float()  # the scores for the token after the prompt

print(f"prompt: {args.prompt!r}\n\nthe next token, by temperature (top 5 and their probabilities):")
first_step: list[dict[str, Any]] = []
for temperature in (0.1, 1.0, 2.0):
    probs = torch.softmax(logits / temperature, dim=-1)
    top = torch.topk(probs, 5)
    shown = "  ".join(
        f"{tokenizer.decode([int(i)])!r} {float(p):.2f}" for p, i in zip(top.values, top.indices)
    )
    # The nucleus: the fewest tokens whose probabilities add up to at least p.
    sorted_probs = torch.sort(probs, descending=True).values.cumsum(0)
    nucleus = {p: int((sorted_probs < p).sum()) + 1 for p in (0.1, 0.95)}
    print(f"  T={temperature:<4} {shown}\n         top-p 0.1 keeps {nucleus[0.1]} token(s), "
          f"top-p 0.95 keeps {nucleus[0.95]:,} of {len(probs):,}")
    first_step.append({
        "temperature": temperature,
        "top5": [[tokenizer.decode([int(i)]), float(p)] for p, i in zip(top.values, top.indices)],
        "top_p_0.1_keeps": nucleus[0.1],
        "top_p_0.95_keeps": nucleus[0.95],
    })

# ---- whole continuations, one row per setting ------------------------------------------------------
SAMPLE = {"do_sample": True, "temperature": 1.0, "top_k": None, "top_p": None}  # no filter by default
settings: list[tuple[str, dict[str, object]]] = [
    ("greedy", {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}),
    ("greedy again", {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}),
    ("temperature 0.1", {**SAMPLE, "temperature": 0.1}),
    ("temperature 1.0", {**SAMPLE, "temperature": 1.0}),
    ("temperature 2.0", {**SAMPLE, "temperature": 2.0}),
    ("top-k 1", {**SAMPLE, "top_k": 1}),
    ("top-k 5", {**SAMPLE, "top_k": 5}),
    ("top-k 200", {**SAMPLE, "top_k": 200}),
    ("top-p 0.1", {**SAMPLE, "top_p": 0.1}),
    ("top-p 0.95", {**SAMPLE, "top_p": 0.95}),
]

print(f"\n{args.max_tokens} tokens per row, seed {args.seed} before every row:\n")
print(f"{'setting':<16} {'= greedy':<9} continuation")
greedy_text = None
rows: list[dict[str, Any]] = []
for label, knobs in settings:
    # generate() draws from torch's global generator; reseeding makes each row reproducible.
    torch.manual_seed(args.seed)
    with torch.inference_mode():
        # The model's generation config may carry its own defaults (e.g. top_k); the explicit
        # None values above switch every filter off unless the row asks for it.
        output = model.generate(
            **inputs, max_new_tokens=args.max_tokens, pad_token_id=tokenizer.eos_token_id, **knobs
        )
    text = tokenizer.decode(output[0, inputs.input_ids.shape[1] :], skip_special_tokens=True)
    greedy_text = text if greedy_text is None else greedy_text
    same = "yes" if text == greedy_text else ""
    print(f"{label:<16} {same:<9} {text!r}")
    rows.append({"setting": label, "knobs": knobs, "same_as_greedy": text == greedy_text, "text": text})

body = {"prompt": args.prompt, "seed": args.seed, "max_tokens": args.max_tokens,
        "first_step": first_step, "rows": rows}
model_info = {"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256}
if not args.no_save:
    path = save_results("ch01_sampling", body, device=str(model.device), model=model_info, started=started)
    print(f"\nwrote {path}")
