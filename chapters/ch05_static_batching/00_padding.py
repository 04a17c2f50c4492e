"""00 — padding: three prompts of different lengths in one rectangle, and what keeps them apart.

A batch is a [rows, columns] tensor, so prompts of different lengths are padded to the longest.
This file builds that batch for three prompts and prints what the engine builds:

* the token ids, padded on the LEFT, so every row's newest token is in the last column (a decode
  step then appends one column to all rows at once);
* the positions, counted per row from 0, with -1 on padding;
* the attention mask that follows from them (chapter 3's `causal_visibility`): a query sees keys at
  positions 0..its own, and never a key at a negative position.

Then it checks the claim the chapter rests on: each row's next-token logits, computed in the batch,
equal the same prompt's logits computed alone (max |difference|, float32), through the engine's
batch cache and through chapter 3's cacheless attention. Two deliberate mistakes (run without a
cache: the question is about the model's inputs) show what the mask and positions are for:

* "no mask": the padding is treated as real tokens (positions 0..W-1 for the whole row);
* "column positions": the mask is right, but positions are counted from the batch's left edge
  instead of the row's first token (every real token shifted by the row's padding).

Hypothesis: the first mistake changes the logits (the row attends to padding); the second changes
them only by rounding, because RoPE makes attention depend on position *differences*, which a
constant shift leaves alone (a model with learned absolute positions would break). Falsified if
"column positions" moved a logit by more than float32 rounding.

Writes results/cpu/ch05_padding.json (results/gpu/ on a GPU).

Run it:  python 00_padding.py            (a few seconds after the model loads)
"""


import torch

from chapters.ch03_model.model import NoCacheAttention, causal_visibility
from chapters.ch03_model.oracle import left_pad
from chapters.ch05_static_batching.batch_cache import BatchKVCache
from chapters.ch05_static_batching.engine import StaticBatchEngine
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser

parser = script_parser(__doc__)
args, started = parse_script(parser)

engine = StaticBatchEngine(args.model)
texts = ["Hi", "The capital of France is", "According to all known laws of aviation, there is"]
prompts = [engine.encode(t) for t in texts]
ids, positions = left_pad(prompts, pad_id=engine.eos_token_id, device=engine.device)
W = ids.shape[1]

print("token ids, left-padded (. = padding):")
for row in range(len(prompts)):
    cells = [" ." if p < 0 else engine.tokenizer.decode([t]).replace(" ", "_")[:8]
             for t, p in zip(ids[row].tolist(), positions[row].tolist())]
    print("  " + " ".join(f"{c:>8s}" for c in cells))
print("\npositions (-1 = padding):")
for row in positions.tolist():
    print("  " + " ".join(f"{p:>3d}" for p in row))
visible = causal_visibility(positions, positions)
print(f"\nrow 0's attention mask ({len(prompts[0])} real token(s)): query (rows) may see key (columns)")
for q in range(W):
    print("  " + "".join("x" if v else "." for v in visible[0, q].tolist()) + f"   position {positions[0, q].item()}")


@torch.inference_mode()
def last_logits(ids: torch.Tensor, positions: torch.Tensor, cached: bool = False) -> torch.Tensor:
    """Each row's logits at the last column (the next-token scores), through chapter 3's cacheless
    attention, or through the engine's batch cache (which stores a key in the slot of its position)."""
    attn = (BatchKVCache.for_model(engine.model, ids.shape[0], ids.shape[1], ids.shape[1]) if cached
            else NoCacheAttention())
    return engine.model(ids, positions, attn, last_only=True)[:, -1].float()


alone = torch.cat([last_logits(torch.tensor([p], device=engine.device),
                               torch.arange(len(p), device=engine.device)[None]) for p in prompts])
column = torch.arange(W, device=engine.device).expand_as(ids)
variants = {
    "per-row positions + mask (the engine)": (positions, True),
    "per-row positions + mask, no cache": (positions, False),
    "no mask (padding read as tokens)": (column, False),
    "mask, but column positions": (torch.where(positions >= 0, column, -1), False),
}
results = []
print(f"\n{'variant':<40s} " + " ".join(f"{'row ' + str(r) + ' max|diff|':>16s}" for r in range(len(prompts)))
      + "  same next token")
for name, (pos, cached) in variants.items():
    batched = last_logits(ids, pos, cached)
    diff = (batched - alone).abs().max(dim=-1).values.tolist()
    same = (batched.argmax(-1) == alone.argmax(-1)).tolist()
    print(f"{name:<40s} " + " ".join(f"{d:16.2e}" for d in diff) + f"  {same}")
    results.append({"variant": name, "attention": "BatchKVCache" if cached else "NoCacheAttention",
                    "max_abs_diff_per_row": diff, "same_next_token_per_row": same})

body = {
    "prompts": texts,
    "prompt_tokens": [len(p) for p in prompts],
    "padded_width": W,
    "positions": positions.tolist(),
    "max_abs_logit": alone.abs().max().item(),
    "variants": results,
    "engine": engine.provenance(),
}
prov = engine.provenance()
path = save_results("ch05_padding", body, device=prov["device"], notes=args.notes, started=started,
                    model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})
print(f"\nwrote {path}")
