"""03 — where one cached decode step's time goes, against the floor set by the weights.

With the cache, a decode step runs one position: every weight matrix multiplies one vector. Those
matrix-vector products read all 538 MB of float32 weights, and nothing the engine does can make a
step cheaper than that (short of batching, chapter 5, or smaller weights, chapter 12). So measure:

1. the floor: every `nn.Linear` of the model (q, k, v, o, gate, up, down in 30 layers, and the
   output head) applied to one vector, in the model's order, nothing else;
2. the model's decode step: the same products plus norms, rotation, the cache write, attention;
3. the engine's time per output token (TPOT): the step plus sampling and the Python loop;
4. Hugging Face `generate` (chapter 1) on the same prompt, for scale.

All alternated over --repeats rounds, medians reported. Results go to
results/cpu/ch04_step_breakdown.json.

Run it:  python 03_step_breakdown.py --threads 1
"""

import statistics
import time

import torch
from torch import nn

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch04_kv_cache.cache import KVCache
from chapters.ch04_kv_cache.engine import KVCacheEngine
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--tokens", type=int, default=32, help="tokens per engine request")
args, started = parse_script(parser)

loaded = load_model(args.model)
engine, baseline = KVCacheEngine(loaded), BaselineEngine(loaded)
model, device = engine.model, engine.device
linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
vectors = {m.in_features: torch.randn(1, 1, m.in_features, device=device, dtype=engine.dtype) for m in linears}
prompt = engine.encode(config.PROMPT)
context = len(prompt)
cache = KVCache.for_model(model, rows=1, max_len=context + 1)
with torch.inference_mode():
    model(torch.tensor([prompt], device=device), torch.arange(context, device=device)[None], cache)
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


@torch.inference_mode()
def linears_only() -> float:
    sync()
    t = time.perf_counter()
    for m in linears:
        m(vectors[m.in_features])
    sync()
    return (time.perf_counter() - t) * 1000


@torch.inference_mode()
def decode_step() -> float:
    sync()
    t = time.perf_counter()
    model(torch.tensor([[prompt[-1]]], device=device), torch.tensor([[context]], device=device), cache,
          last_only=True)
    sync()
    cache.lengths -= 1  # rewind, so every repeat is the step at the same position (measurement only)
    return (time.perf_counter() - t) * 1000


params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)


def stream_tpot(eng) -> float:
    """Time per output token after the first, timed from the token stream (as the harness does),
    so chapter 1's `generate()`, which reports no TPOT itself, is measured the same way."""
    stamps = [time.perf_counter() for _ in eng.stream(prompt, params)]
    return (stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1)


timings: dict[str, list[float]] = {"linears_only_ms": [], "decode_step_ms": [], "ch04_tpot_ms": [],
                                   "ch01_tpot_ms": []}
linears_only(), decode_step(), engine.generate(prompt, params), baseline.generate(prompt, params)  # warm-up
for _ in range(args.repeats):
    timings["linears_only_ms"].append(statistics.median(linears_only() for _ in range(5)))
    timings["decode_step_ms"].append(statistics.median(decode_step() for _ in range(5)))
    timings["ch04_tpot_ms"].append(stream_tpot(engine))
    timings["ch01_tpot_ms"].append(stream_tpot(baseline))

med = {k: statistics.median(v) for k, v in timings.items()}
weights_mb = sum(m.weight.numel() * m.weight.element_size() for m in linears) / 1e6
print(f"{len(linears)} linear layers, {weights_mb:.0f} MB of weights read per step "
      f"({engine.dtype}, {torch.get_num_threads()} thread(s)); medians of {args.repeats} rounds")
print(f"  the floor: linear layers alone          {med['linears_only_ms']:7.1f} ms "
      f"({weights_mb / med['linears_only_ms']:.1f} GB/s of weights)")
print(f"  the model's decode step (position {context})  {med['decode_step_ms']:7.1f} ms  "
      f"= floor + {med['decode_step_ms'] - med['linears_only_ms']:.1f} ms (norms, RoPE, cache write, attention)")
print(f"  ch04 engine: time per output token      {med['ch04_tpot_ms']:7.1f} ms  ({1000 / med['ch04_tpot_ms']:.1f} tok/s)")
print(f"  ch01 HF generate: time per output token {med['ch01_tpot_ms']:7.1f} ms  ({1000 / med['ch01_tpot_ms']:.1f} tok/s)")
print(f"  the floor is {med['linears_only_ms'] / med['ch04_tpot_ms']:.0%} of ch04's time per token")

record = {"threads": torch.get_num_threads(), "dtype": str(engine.dtype), "linear_layers": len(linears),
          "weights_mb_read_per_step": weights_mb, "context": context, "tokens": args.tokens,
          "medians_ms": med, "all_ms": timings}
path = save_results("ch04_step_breakdown", record, device=str(device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
print(f"\nwrote {path}")
