"""01 — RMSNorm and rotary position embedding, the two small layers with a big job.

RMSNorm rescales each token's vector to a root-mean-square of 1, then multiplies by a learned
weight per channel. There is no mean subtraction and no bias (LayerNorm has both): cheaper, and it
works as well. This script shows a real hidden state before and after, from the real model.

RoPE encodes position by rotating pairs of query/key channels by an angle proportional to the
position, each pair at its own frequency (theta from the config sets the slowest one). Three facts
are checked numerically here, on real layer-0 queries and keys:

1. rotation keeps each vector's length (it is a rotation);
2. the score q·k depends only on the distance between the two positions, not where they are:
   positions (7, 3) give the same score as (1007, 1003);
3. without the rotation the score is the same at every pair of positions: word order is invisible.

It also prints how the score changes with distance and the range of the rotation frequencies.

Results go to results/cpu/ch03_rmsnorm_rope.json.

Run it:  python 01_rmsnorm_rope.py
"""

import math

import torch

from chapters.ch03_model.model import from_hf, rotate_half
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.model import load_model

parser = script_parser(__doc__)
args, started = parse_script(parser)

loaded = load_model(args.model)
model = from_hf(loaded.model)
cfg = model.config
ids = torch.tensor([loaded.tokenizer.encode(config.PROMPT)], device=model.lm_head.weight.device)

# ---- RMSNorm --------------------------------------------------------------------------------------
with torch.inference_mode():
    x = model.embed_tokens(ids).float()[0]  # [tokens, hidden]
    norm = model.layers[0].input_layernorm
    # The layer, written out: divide by the root-mean-square, then scale per channel.
    by_hand = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * norm.weight.float()
    out = norm(x)
rms = lambda t: t.pow(2).mean(-1).sqrt()  # noqa: E731
print("RMSNorm on the prompt's embeddings (layer 0's input norm)")
print(f"  rms of each token before: {[round(v, 4) for v in rms(x)[:6].tolist()]} ...")
print(f"  rms after dividing:       {[round(v, 4) for v in rms(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps))[:6].tolist()]} ...")
print(f"  learned weight: mean {norm.weight.float().mean():.3f}, min {norm.weight.float().min():.3f}, "
      f"max {norm.weight.float().max():.3f} over {cfg.hidden_size} channels")
norm_diff = (by_hand - out).abs().max().item()
print(f"  module vs the formula written out: max |diff| = {norm_diff:.2e}")

# ---- RoPE -----------------------------------------------------------------------------------------
# A real query and key: layer 0, head 0 (and its KV head 0), from the prompt's last two tokens,
# before rotation. Each is rotated as if it stood at a position we choose.
with torch.inference_mode():
    attn0 = model.layers[0].self_attn
    h = model.layers[0].input_layernorm(model.embed_tokens(ids))
    q_vec = attn0.q_proj(h)[0, -1, : cfg.head_dim].float()
    k_vec = attn0.k_proj(h)[0, -2, : cfg.head_dim].float()


def rotated(vec: torch.Tensor, position: int) -> torch.Tensor:
    """`vec` rotated to `position`, through the model's own RoPE module."""
    t = vec.to(model.rope.cos.device)[None, None, None]  # [batch, heads, tokens, head_dim]
    out, _ = model.rope(t, t, torch.tensor([[position]], device=t.device))
    return out[0, 0, 0]


def score(m: int, n: int) -> float:
    return float(rotated(q_vec, m) @ rotated(k_vec, n))


print("\nRoPE on a real layer-0 query and key (head 0)")
# The rotation written out for one position: each channel pair (i, i + D/2) turns by position * f_i.
pos = 5
cos, sin = model.rope.cos[pos].float(), model.rope.sin[pos].float()
rope_diff = (rotated(q_vec, pos) - (q_vec * cos + rotate_half(q_vec) * sin)).abs().max().item()
lengths = [q_vec.norm().item(), rotated(q_vec, 0).norm().item(), rotated(q_vec, 4000).norm().item()]
print(f"  module vs q*cos + rotate_half(q)*sin at position {pos}: max |diff| = {rope_diff:.2e}")
print(f"  |q| unrotated {lengths[0]:.4f}, at position 0 {lengths[1]:.4f}, at 4000 {lengths[2]:.4f}")
pairs = [(7, 3), (1007, 1003), (5003, 4999), (3, 3), (503, 503)]
print("  score q·k by (query position, key position): same distance, same score")
for m, n in pairs:
    print(f"    ({m:>4}, {n:>4})  distance {m - n:>3}   score {score(m, n):9.4f}")
unrotated = float(q_vec @ k_vec)
print(f"  without RoPE the score is {unrotated:.4f} at every pair of positions: attention would not"
      " know word order")
distances = [0, 1, 2, 4, 8, 16, 64, 256, 1024, 4096]
by_distance = {d: score(d + 100, 100) for d in distances}
print("  score by distance (query at 100 + d, key at 100):")
print("    " + "  ".join(f"d={d}: {s:.2f}" for d, s in by_distance.items()))
inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
wavelengths = (2 * math.pi / inv_freq).tolist()
print(f"  theta {cfg.rope_theta:g}: {len(wavelengths)} frequencies; a full turn every "
      f"{wavelengths[0]:.1f} positions (fastest pair) to every {wavelengths[-1]:,.0f} (slowest)")

record = {
    "rmsnorm": {"rms_before": rms(x).tolist(), "module_vs_formula_max_abs_diff": norm_diff},
    "rope": {
        "module_vs_formula_max_abs_diff": rope_diff,
        "norm_unrotated_pos0_pos4000": lengths,
        "scores_by_position_pair": [[m, n, score(m, n)] for m, n in pairs],
        "score_unrotated": unrotated,
        "score_by_distance": by_distance,
        "wavelength_positions": {"fastest": wavelengths[0], "slowest": wavelengths[-1]},
        "theta": cfg.rope_theta,
    },
}
path = save_results("ch03_rmsnorm_rope", record, device=str(ids.device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
