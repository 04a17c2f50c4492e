"""00 — one prompt through the hand-written model, layer by layer, with every tensor's shape.

`model.py` is about 150 lines of PyTorch. This script walks a prompt through it by hand, calling
the same submodules `Llama.forward` calls, and prints the shape after each step: token ids, the
embedding, the first layer's norm, projections, rotation, attention and MLP, then the other layers,
the final norm and the logits. At the end the walk must give exactly what `model(...)` gives.

Then it counts the parameters by part of the model and the bytes they take at each precision, and
writes both to results/cpu/ch03_shapes.json (results/gpu/ on a GPU).

Run it:  python 00_shapes.py
         python 00_shapes.py --prompt "The capital of France is"
"""

from typing import Any

import torch

from chapters.ch03_model.model import NoCacheAttention, from_hf, parameter_count
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--prompt", default="The capital of France is")
args, started = parse_script(parser)

loaded = load_model(args.model)
model = from_hf(loaded.model)
cfg = model.config
print(f"config: {cfg}\n")

ids = torch.tensor([loaded.tokenizer.encode(args.prompt)], device=model.lm_head.weight.device)
B, T = ids.shape
positions = torch.arange(T, device=ids.device)[None]
attn = NoCacheAttention()
shapes: list[tuple[str, list[int]]] = []


def show(step: str, tensor: torch.Tensor) -> torch.Tensor:
    shapes.append((step, list(tensor.shape)))
    print(f"  {step:<52} {str(list(tensor.shape)):>18}")
    return tensor


with torch.inference_mode():
    show("input_ids            [batch, tokens]", ids)
    x = show("embed_tokens(ids)    [batch, tokens, hidden]", model.embed_tokens(ids))

    # Layer 0 in detail: the same code as DecoderLayer.forward and SelfAttention.forward.
    layer = model.layers[0]
    sa = layer.self_attn
    h = show("layer 0  input_layernorm(x)", layer.input_layernorm(x))
    q = show("  q_proj(h)          [batch, tokens, heads*head_dim]", sa.q_proj(h))
    k = show("  k_proj(h)          [.., kv_heads*head_dim]", sa.k_proj(h))
    v = show("  v_proj(h)", sa.v_proj(h))
    q = show("  q as heads         [batch, heads, tokens, head_dim]", q.view(B, T, cfg.num_heads, cfg.head_dim).transpose(1, 2))
    k = show("  k as heads         [batch, kv_heads, tokens, head_dim]", k.view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2))
    v = v.view(B, T, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
    q, k = model.rope(q, k, positions)
    show("  rope(q), rope(k)   (shapes unchanged)", q)
    group = cfg.num_heads // cfg.num_kv_heads
    scores = q.reshape(B, cfg.num_kv_heads, group * T, cfg.head_dim) @ k.transpose(-1, -2)
    show(f"  scores             [batch, kv_heads, {group}*tokens, tokens]", scores)
    o = show("  attn.forward(...)  [batch, heads, tokens, head_dim]", attn.forward(0, q, k, v, positions))
    o = show("  o_proj(heads concatenated)", sa.o_proj(o.transpose(1, 2).reshape(B, T, -1)))
    x = show("  x + attention", x + o)
    h = layer.post_attention_layernorm(x)
    gate = show("  gate_proj(h)       [batch, tokens, intermediate]", layer.mlp.gate_proj(h))
    x = show("  x + down_proj(silu(gate) * up)", x + layer.mlp(h))

    for layer in model.layers[1:]:
        x = layer(x, positions, model.rope, attn)
    show(f"layers 1..{cfg.num_layers - 1} (each the same, shape unchanged)", x)
    x = show("norm(x)", model.norm(x))
    logits = show("lm_head(x)           [batch, tokens, vocab]", model.lm_head(x))
    same = torch.equal(logits, model(ids, positions, attn))

top = logits[0, -1].float().softmax(-1).topk(5)
print(f"\nthe walk equals model(ids, positions, attn) exactly: {same}")
print(f"next token after {args.prompt!r}:")
for p, i in zip(top.values.tolist(), top.indices.tolist()):
    print(f"  {p:6.3f}  {loaded.tokenizer.decode([i])!r}")

# ---- the parameters, by part ------------------------------------------------------------------
parts: dict[str, int] = {}
for name, p in model.named_parameters():  # the tied output head is the embedding: counted once
    part = ("embedding (= output head, tied)" if name.startswith("embed_tokens")
            else "attention q,k,v,o" if ".self_attn." in name
            else "MLP gate,up,down" if ".mlp." in name
            else "RMSNorm weights")
    parts[part] = parts.get(part, 0) + p.numel()
total = parameter_count(model)
print(f"\n{'part':<34} {'parameters':>12} {'share':>7}")
for part, n in parts.items():
    print(f"{part:<34} {n:>12,} {n / total:>7.1%}")
print(f"{'total':<34} {total:>12,}")
bytes_per: dict[str, int] = {}
print(f"\n{'dtype':<10} {'bytes/param':>11} {'weights MB':>11}")
for name, size in (("float32", 4), ("bfloat16", 2), ("int8", 1), ("int4", 0.5)):
    bytes_per[name] = int(total * size)
    print(f"{name:<10} {size:>11} {total * size / 1e6:>11.1f}")

record: dict[str, Any] = {
    "prompt": args.prompt,
    "config": vars(cfg),
    "shapes": shapes,
    "walk_equals_forward": same,
    "parameters": {"total": total, "by_part": parts, "bytes_by_dtype": bytes_per},
}
path = save_results("ch03_shapes", record, device=str(ids.device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
