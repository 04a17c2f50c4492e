"""02 — grouped-query attention with a causal mask, written out.

Attention is the only place where tokens look at each other. For each query head: scores = q·k for
every visible key (divided by sqrt(head_dim)), a softmax turns the scores into weights summing to
1, and the output is the weighted sum of the values. This script runs each step on the real
layer-0 queries, keys and values of a prompt and shows:

1. the causal mask: token t sees tokens 0..t, never a later one (it does not exist yet when t is
   generated), and the attention weights of one head under it;
2. grouped-query attention: 9 query heads share 3 key/value heads, so heads 0-2 read KV head 0,
   3-5 KV head 1, 6-8 KV head 2. `attend` gets this without copying keys and values; a loop over
   heads that picks each head's KV head by hand gives the same output;
3. a left-padded batch of two prompts: padding slots have position -1 and nobody sees them, so
   each row's output equals its solo run;
4. how big the score tensor is: tokens x tokens per head, the reason chapter 8 exists.

Results go to results/cpu/ch03_attention.json.

Run it:  python 02_attention.py
"""


import torch

from chapters.ch03_model.model import NoCacheAttention, attend, causal_visibility, from_hf
from chapters.ch03_model.oracle import left_pad
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--prompt", default="The cat sat on the mat")
parser.add_argument("--head", type=int, default=4, help="which query head's weights to print")
args, started = parse_script(parser)

loaded = load_model(args.model)
model = from_hf(loaded.model)
cfg = model.config
tok = loaded.tokenizer
device = model.lm_head.weight.device
ids = torch.tensor([tok.encode(args.prompt)], device=device)
B, T = ids.shape
positions = torch.arange(T, device=device)[None]
pieces = [tok.decode([i]) for i in ids[0].tolist()]

with torch.inference_mode():
    layer = model.layers[0]
    h = layer.input_layernorm(model.embed_tokens(ids))
    sa = layer.self_attn
    q = sa.q_proj(h).view(B, T, cfg.num_heads, cfg.head_dim).transpose(1, 2).float()
    k = sa.k_proj(h).view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2).float()
    v = sa.v_proj(h).view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2).float()
    q, k = model.rope(q, k, positions)

# ---- 1. the causal mask and one head's weights ----------------------------------------------------
visible = causal_visibility(positions, positions)[0]
print(f"causal mask for {T} tokens (row = query, column = key; 1 = may attend)")
for piece, row in zip(pieces, visible.int().tolist()):
    print(f"  {piece!r:>10}  {' '.join(map(str, row))}")

group = cfg.num_heads // cfg.num_kv_heads
kv_head = args.head // group
scores = (q[0, args.head] @ k[0, kv_head].T) / cfg.head_dim**0.5  # [T, T]
scores = scores.masked_fill(~visible, float("-inf"))
weights = torch.softmax(scores, dim=-1)  # masked scores are -inf: exp(-inf) = 0 weight
print(f"\nlayer 0, query head {args.head} (reads KV head {kv_head}): attention weights, rows sum to 1")
print("  " + " " * 12 + "".join(f"{p!r:>9}" for p in pieces))
for piece, row in zip(pieces, weights.tolist()):
    print(f"  {piece!r:>10}  " + "".join(f"{w:9.3f}" for w in row))

# ---- 2. grouped-query attention: the grouped matmul against a loop over heads ------------------------
with torch.inference_mode():
    grouped = attend(q, k, v, causal_visibility(positions, positions))
    per_head = []
    for head in range(cfg.num_heads):
        kh, vh = k[:, head // group], v[:, head // group]  # this head's shared KV head
        s = (q[:, head] @ kh.transpose(-1, -2)) / cfg.head_dim**0.5
        per_head.append(torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1) @ vh)
    loop = torch.stack(per_head, dim=1)
gqa_diff = (grouped - loop).abs().max().item()
print(f"\ngrouped-query attention: {cfg.num_heads} query heads, {cfg.num_kv_heads} KV heads, "
      f"{group} query heads per KV head")
print(f"  attend() (one matmul per KV head group) vs a loop over heads: max |diff| = {gqa_diff:.2e}")
kv_bytes = 2 * cfg.num_kv_heads * cfg.head_dim * 4
print(f"  keys+values per token per layer: {cfg.num_kv_heads} KV heads x {cfg.head_dim} x 2 = "
      f"{kv_bytes} bytes in float32; with one KV head per query head it would be {kv_bytes * group}")

# ---- 3. a left-padded batch: padding is invisible ------------------------------------------------
prompts = [tok.encode(args.prompt), tok.encode("Hello")]
batch_ids, batch_pos = left_pad(prompts, pad_id=loaded.eos_token_id, device=device)
with torch.inference_mode():
    batch = model(batch_ids, batch_pos, NoCacheAttention())
    solo = [model(torch.tensor([p], device=device), torch.arange(len(p), device=device)[None],
                  NoCacheAttention()) for p in prompts]
print(f"\nleft-padded batch: ids {batch_ids.tolist()}\n  positions {batch_pos.tolist()}")
pad_diffs = []
for row, (p, s) in enumerate(zip(prompts, solo)):
    diff = (batch[row, batch_ids.shape[1] - len(p):] - s[0]).abs().max().item()
    pad_diffs.append(diff)
    print(f"  row {row}: {len(p)} tokens, logits vs its solo run: max |diff| = {diff:.2e}")

# ---- 4. the size of the scores ----------------------------------------------------------------------
print("\nscore tensor of one layer (all heads), float32, for one sequence:")
score_bytes = {}
for n in (T, 512, 2048, 8192):
    score_bytes[n] = cfg.num_heads * n * n * 4
    print(f"  {n:>5} tokens: {cfg.num_heads} heads x {n}^2 x 4 B = {score_bytes[n] / 1e6:8.1f} MB")

record = {
    "prompt": args.prompt,
    "tokens": pieces,
    "head": args.head,
    "weights": weights.tolist(),
    "gqa_grouped_vs_loop_max_abs_diff": gqa_diff,
    "kv_bytes_per_token_per_layer_float32": {"gqa": kv_bytes, "one_kv_head_per_query_head": kv_bytes * group},
    "left_padded_rows_vs_solo_max_abs_diff": pad_diffs,
    "score_bytes_by_tokens": score_bytes,
}
path = save_results("ch03_attention", record, device=str(device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
