"""01 — one decode step, with and without a cache, as the sequence grows.

Without a cache (chapter 3), the step that makes token t runs all t positions through the model.
With one (chapter 4), it runs one position and reads the keys and values of the t - 1 earlier ones
from the cache. So chapter 3's step time should grow in proportion to the length, and chapter 4's
should stay nearly flat, growing only with attention over the cache (a small term for this model
at these lengths: 9 heads x 64 x t multiply-adds per layer, against ~3.5 million for the weights).

For each context length (shuffled each round so that a change in machine load does not look like a
change with length) the script times chapter 3's forward over that many positions and chapter 4's
decode step at that position, --repeats times, and reports the median. Writes
results/cpu/ch04_step_time.json and a plot next to it.

Run it:  python 01_step_time.py --threads 1
         python 01_step_time.py --lengths 16 256 2048 --repeats 5
"""

import random
import statistics
import time

import matplotlib
import torch

from chapters.ch03_model.model import NoCacheAttention, from_hf
from chapters.ch04_kv_cache.cache import KVCache
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128, 256, 512, 1024])
parser.add_argument("--repeats", type=int, default=5)
args, started = parse_script(parser)

loaded = load_model(args.model)
model = from_hf(loaded.model)
device = model.lm_head.weight.device
gen = torch.Generator().manual_seed(0)
ids = torch.randint(0, model.config.vocab_size, (1, max(args.lengths)), generator=gen).to(device)
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

# One cache per length, holding positions 0 .. L-2: the decode step at position L-1 is then timed.
caches = {}
with torch.inference_mode():
    for n in args.lengths:
        caches[n] = KVCache.for_model(model, rows=1, max_len=n)
        model(ids[:, : n - 1], torch.arange(n - 1, device=device)[None], caches[n])


@torch.inference_mode()
def no_cache_step(n: int) -> float:
    sync()
    t = time.perf_counter()
    model(ids[:, :n], torch.arange(n, device=device)[None], NoCacheAttention(), last_only=True)
    sync()
    return time.perf_counter() - t


@torch.inference_mode()
def cached_step(n: int) -> float:
    cache = caches[n]
    sync()
    t = time.perf_counter()
    model(ids[:, n - 1 : n], torch.tensor([[n - 1]], device=device), cache, last_only=True)
    sync()
    elapsed = time.perf_counter() - t
    cache.lengths -= 1  # rewind: the next repeat writes the same slot again (measurement only)
    return elapsed


times: dict[str, dict[int, list[float]]] = {"ch03_no_cache": {}, "ch04_kv_cache": {}}
for n in args.lengths:  # warm-up: the first call at each size pays for allocating its memory
    no_cache_step(n), cached_step(n)
order = list(args.lengths)
for _ in range(args.repeats):
    random.shuffle(order)
    for n in order:
        times["ch03_no_cache"].setdefault(n, []).append(no_cache_step(n) * 1000)
        times["ch04_kv_cache"].setdefault(n, []).append(cached_step(n) * 1000)

print(f"{'context':>7} {'ch03 step ms':>13} {'ch04 step ms':>13} {'ratio':>7}   (median of {args.repeats})")
rows = []
for n in args.lengths:
    a, b = statistics.median(times["ch03_no_cache"][n]), statistics.median(times["ch04_kv_cache"][n])
    rows.append({"context": n, "ch03_ms": a, "ch04_ms": b, "ratio": a / b,
                 "ch03_all_ms": times["ch03_no_cache"][n], "ch04_all_ms": times["ch04_kv_cache"][n]})
    print(f"{n:>7} {a:>13.1f} {b:>13.1f} {a / b:>7.1f}")
first, last = rows[0], rows[-1]
print(f"from {first['context']} to {last['context']} positions: ch03's step grew "
      f"{last['ch03_ms'] / first['ch03_ms']:.1f}x, ch04's {last['ch04_ms'] / first['ch04_ms']:.2f}x")

record = {"lengths": args.lengths, "repeats": args.repeats, "threads": torch.get_num_threads(),
          "dtype": str(next(model.parameters()).dtype), "steps": rows}
path = save_results("ch04_step_time", record, device=str(device), started=started,
                    model={"manifest": loaded.manifest, "manifest_sha256": loaded.manifest_sha256})
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 4))
xs = [r["context"] for r in rows]
ax.plot(xs, [r["ch03_ms"] for r in rows], marker="o", label="ch03: no cache (all positions)")
ax.plot(xs, [r["ch04_ms"] for r in rows], marker="o", label="ch04: KV cache (one position)")
ax.set_xlabel("position of the token being made")
ax.set_ylabel("one step's forward time (ms, median)")
ax.set_title(f"decode step time, {device.type} {record['dtype'].removeprefix('torch.')}")
ax.legend()
fig.tight_layout()
fig.savefig(path.with_suffix(".png"), dpi=120)
print(f"\nwrote {path} and {path.with_suffix('.png')}")
