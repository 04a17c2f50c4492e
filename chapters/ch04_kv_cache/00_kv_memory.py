"""00 — what a KV cache costs in memory, for this model.

Every layer keeps, for every position, one key and one value per KV head:

    bytes per token = layers x 2 (K and V) x kv_heads x head_dim x bytes per number

This script prints that number for SmolLM2-135M in float32 (the CPU) and bfloat16 (the GPU), the
cache of one request at several lengths up to the full context, what grouped-query attention saves
against full multi-head attention (one KV head per query head), and how the cache compares with the
weights, which every step reads anyway. Everything here is arithmetic on the config, checked
against the bytes a real `KVCache` allocates. Results go to results/cpu/ch04_kv_memory.json.

Run it:  python 00_kv_memory.py
"""


import torch

from chapters.ch03_model.model import ModelConfig
from chapters.ch04_kv_cache.cache import KVCache, kv_bytes_per_token
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.model import load_model

parser = script_parser(__doc__)
args, started = parse_script(parser)

loaded = load_model(args.model)
cfg = ModelConfig.from_hf(loaded.model.config)
params = sum(p.numel() for p in loaded.model.parameters())
MB = 1e6
lengths = [1, 256, 1024, 4096, cfg.max_position_embeddings]
record: dict = {"config": vars(cfg), "parameters": params, "by_dtype": {}}

print(f"{cfg.num_layers} layers x 2 (K, V) x {cfg.num_kv_heads} KV heads x {cfg.head_dim} head_dim "
      f"= {cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim:,} numbers per token")
for dtype in (torch.float32, torch.bfloat16):
    name = str(dtype).removeprefix("torch.")
    per_token = kv_bytes_per_token(cfg, dtype)
    mha = per_token * cfg.num_heads // cfg.num_kv_heads  # one KV head per query head
    weights = params * torch.finfo(dtype).bits // 8
    # The formula against what the cache really allocates for 100 positions.
    allocated = KVCache(cfg.num_layers, 1, cfg.num_kv_heads, cfg.head_dim, 100, "cpu", dtype).nbytes
    print(f"\n{name}: {per_token:,} bytes per token ({per_token / 1024:.1f} KiB); a KVCache of 100 "
          f"positions allocates {allocated:,} = 100 x {allocated // 100:,}")
    print(f"  {'tokens':>6} {'GQA cache MB':>13} {'MHA cache MB':>13} {'cache / weights':>16}")
    rows = []
    for n in lengths:
        rows.append({"tokens": n, "gqa_bytes": per_token * n, "mha_bytes": mha * n,
                     "cache_over_weights": per_token * n / weights})
        print(f"  {n:>6} {per_token * n / MB:>13.2f} {mha * n / MB:>13.2f} {per_token * n / weights:>16.1%}")
    crossover = weights // per_token
    print(f"  weights {weights / MB:.1f} MB: one request's cache outgrows them at {crossover:,} tokens "
          f"(beyond the {cfg.max_position_embeddings:,}-token context)" if crossover > cfg.max_position_embeddings
          else f"  weights {weights / MB:.1f} MB: one request's cache outgrows them at {crossover:,} tokens")
    record["by_dtype"][name] = {"bytes_per_token": per_token, "mha_bytes_per_token": mha,
                                "gqa_saving": mha / per_token, "weights_bytes": weights,
                                "allocated_100_positions": allocated, "tokens_to_equal_weights": crossover,
                                "by_length": rows}
print(f"\nGQA stores {cfg.num_kv_heads} KV heads instead of {cfg.num_heads}: "
      f"{cfg.num_heads // cfg.num_kv_heads}x less cache per token")
path = save_results("ch04_kv_memory", record, device="cpu", started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
