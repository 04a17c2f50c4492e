"""06 — chapter 4 against chapter 3 (and chapter 1) at 32, 128, 256 and 512 new tokens, in one run.

For each output length: the three engines alternately on the seed book's prompt, greedy, EOS
ignored, --runs rounds with the order rotating (chapter 3, no cache, is the reference). Prints, per
length, tok/s of each engine, the speed-up of chapter 4 over chapter 3 and over chapter 1 with
their spread over the rounds, and whether the tokens are identical. Writes
results/cpu/ch04_offline.json (results/gpu/ on a GPU) and a plot of speed-up against length.

    python 06_benchmark_offline.py --threads 1              (about half an hour on a 2-core CPU:
                                                             chapter 3 at 512 tokens is most of it)
    python chapters/ch04_kv_cache/06_benchmark_offline.py --lengths 32 128 --runs 3

Hypothesis: the speed-up grows with length. Chapter 3's step t runs prompt + t positions, so its
total work grows with the square of the length; chapter 4's decode step runs one position (plus
attention over the cache), so its total grows linearly. Falsified if the ratio were flat.
"""

from typing import Any

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch03_model.engine import ModelEngine
from chapters.ch04_kv_cache.engine import KVCacheEngine
import matplotlib

from shared.benchmark import comparison_table, compare_engines, provenance, save_results
from shared.benchmark.cli import offline_parser, parse
from shared.contracts import SamplingParams
from shared.model import load_model

parser = offline_parser(__doc__)
parser.set_defaults(runs=2)
parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 256, 512],
                    help="new tokens per request, one comparison each (default %(default)s)")
args = parse(parser)
started = provenance(args.notes)

loaded = load_model(args.model)  # one load for all three engines
engines = [ModelEngine(loaded), KVCacheEngine(loaded), BaselineEngine(loaded)]
labels = ["ch03_model", "ch04_kv_cache", "ch01_baseline"]

by_length: list[dict[str, Any]] = []
for n in args.lengths:
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=not args.stop_at_eos)
    print(f"\n=== {n} new tokens ===")
    cmp = compare_engines(engines, args.prompts, params, args.runs, args.warmup if n == args.lengths[0] else 0, labels)
    print(comparison_table(cmp))
    # Ratios per round: ch04 over ch03 (engine 1 / engine 0) and ch04 over ch01 (engine 1 / engine 2).
    tps = [r.tokens_per_second for r in cmp.results]
    over_ch01 = [b / c for b, c in zip(tps[1], tps[2]) if c > 0]
    by_length.append({
        "new_tokens": n,
        "tokens_per_second": {label: r.summary()["run_tokens_per_second"] for label, r in zip(labels, cmp.results)},
        "speedup_ch04_over_ch03": cmp.speedup(1),
        "speedup_ch04_over_ch01": {"values": over_ch01, "mean": sum(over_ch01) / len(over_ch01),
                                   "min": min(over_ch01), "max": max(over_ch01)},
        "same_tokens_as_ch03": {"ch04_kv_cache": cmp.same_tokens(1), "ch01_baseline": cmp.same_tokens(2)},
        "comparison": cmp.as_dict(),
    })

print(f"\n{'new tokens':>10} {'ch03 tok/s':>11} {'ch04 tok/s':>11} {'ch01 tok/s':>11} "
      f"{'ch04/ch03 mean [min, max]':>26} {'ch04/ch01 mean [min, max]':>26} {'tokens = ch03':>14}")
for row in by_length:
    t, s3, s1 = row["tokens_per_second"], row["speedup_ch04_over_ch03"], row["speedup_ch04_over_ch01"]
    print(f"{row['new_tokens']:>10} {t['ch03_model']['mean']:>11.2f} {t['ch04_kv_cache']['mean']:>11.2f} "
          f"{t['ch01_baseline']['mean']:>11.2f} "
          f"{s3['mean']:>10.2f}x [{s3['min']:.2f}, {s3['max']:.2f}]    "
          f"{s1['mean']:>10.2f}x [{s1['min']:.2f}, {s1['max']:.2f}]    "
          f"{str(all(row['same_tokens_as_ch03'].values())):>14}")

if not args.no_save:
    prov = engines[1].provenance()
    body = {"workload": {"prompts": args.prompts, "lengths": args.lengths, "runs": args.runs,
                         "warmup": args.warmup}, "by_length": by_length}
    path = save_results(args.name or "ch04_offline", body, device=prov["device"], notes=args.notes,
                        out_dir=args.out, started=started,
                        model={"manifest": prov["model_manifest"], "manifest_sha256": prov["manifest_sha256"]})
    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["new_tokens"] for r in by_length]
    for key, label in (("speedup_ch04_over_ch03", "ch04 / ch03 (no cache)"),
                       ("speedup_ch04_over_ch01", "ch04 / ch01 (HF generate)")):
        means = [r[key]["mean"] for r in by_length]
        low = [r[key]["mean"] - r[key]["min"] for r in by_length]
        high = [r[key]["max"] - r[key]["mean"] for r in by_length]
        ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=label)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("new tokens per request")
    ax.set_ylabel("speed-up (tok/s ratio, min-max over rounds)")
    ax.set_title(f"ch04 KV cache, {prov['device']} {prov['dtype']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=120)
    print(f"\nwrote {path} and {path.with_suffix('.png')}")
