"""02 — two samplers, one definition: the pure-Python reference and the vectorised torch version.

`sampling.py` defines sampling twice. `ReferenceSampler` is plain Python over a list of floats,
written to be read: temperature, then top-k, then top-p (vLLM's order), then one draw by inverse
CDF from the uniform number `derive_seed(seed, step)` gives. `TorchSampler` does the same with
tensor operations, for one row or a batch. They must pick the same token every time.

This script takes real next-token logits from the model (the last positions of the prompt), runs
both samplers on them for every configuration and many seeds, and counts mismatches (the
hypothesis: zero; one would falsify it). Then it times one selection with each sampler at greedy,
temperature 0.8 alone, and the realistic setting temperature 0.8, top-k 40, top-p 0.9, against the
time of one forward pass. Writes results/cpu/ch02_samplers.json.

Run it:  python 02_samplers.py             (about a minute on a 2-core CPU)
         python 02_samplers.py --seeds 50 --threads 1
"""

import itertools
import statistics
import time
from collections.abc import Callable

import torch

from chapters.ch02_generate_loop.sampling import ReferenceSampler, TorchSampler, derive_seed
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams
from shared.model import load_model

parser = script_parser(__doc__)
parser.add_argument("--prompt", default=config.PROMPT)
parser.add_argument("--rows", type=int, default=8, help="positions of the prompt to take logits from")
parser.add_argument("--seeds", type=int, default=10, help="seeds per configuration and row")
args, started = parse_script(parser)

loaded = load_model(args.model)
ids = torch.tensor([loaded.tokenizer.encode(args.prompt)], device=loaded.model.device)
with torch.inference_mode():
    loaded.model(ids, use_cache=False)  # warm-up: the first call pays one-time costs
    start = time.perf_counter()
    logits = loaded.model(ids, use_cache=False).logits[0, -args.rows :].float()  # [rows, vocab]
    if logits.is_cuda:
        torch.cuda.synchronize()  # the kernels run asynchronously: wait before reading the clock
    forward_ms = (time.perf_counter() - start) * 1000
rows = [row.tolist() for row in logits]
print(f"{logits.shape[0]} rows of real logits, vocabulary {logits.shape[1]}, "
      f"logit range [{logits.min():.1f}, {logits.max():.1f}]; one forward of {ids.shape[1]} "
      f"positions took {forward_ms:.0f} ms")

REALISTIC = SamplingParams(temperature=0.8, top_k=40, top_p=0.9)
CONFIGS = {
    "greedy": SamplingParams(temperature=0.0),
    "temperature 0.8": SamplingParams(temperature=0.8),
    "+ top-k 40": SamplingParams(temperature=0.8, top_k=40),
    "+ top-p 0.9": SamplingParams(temperature=0.8, top_p=0.9),
    "all three": REALISTIC,
}
ref, vec = ReferenceSampler(), TorchSampler()

# ---- 1. the differential test -------------------------------------------------------------------
compared, mismatches, distinct = 0, 0, {name: set() for name in CONFIGS}
for (name, params), r, seed in itertools.product(CONFIGS.items(), range(len(rows)), range(args.seeds)):
    step_seed = derive_seed(seed, r)
    a, b = ref.sample(rows[r], params, step_seed), vec.sample(logits[r], params, step_seed)
    compared += 1
    mismatches += a != b
    distinct[name].add((r, a))
print(f"\ndifferential test: {compared} draws compared, {mismatches} mismatches")
for name in CONFIGS:
    print(f"  {name:16s} {len(distinct[name]) / len(rows):.1f} distinct tokens per row over {args.seeds} seeds")

# ---- 2. what one selection costs ------------------------------------------------------------------


def time_ms(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


costs = []
print(f"\n{'setting':16s} {'reference ms':>13s} {'torch ms':>9s} {'ratio':>6s}")
for name in ("greedy", "temperature 0.8", "all three"):
    params = CONFIGS[name]
    # The reference needs a list of floats: the conversion is part of its cost inside an engine.
    t_ref = time_ms(lambda: ref.sample(logits[0].tolist(), params, 1), repeats=5)
    t_vec = time_ms(lambda: vec.sample(logits[0], params, 1), repeats=20)
    costs.append({"setting": name, "params": vars(params),
                  "reference_ms": statistics.median(t_ref), "torch_ms": statistics.median(t_vec),
                  "reference_runs_ms": t_ref, "torch_runs_ms": t_vec})
    print(f"{name:16s} {costs[-1]['reference_ms']:13.2f} {costs[-1]['torch_ms']:9.2f} "
          f"{costs[-1]['reference_ms'] / costs[-1]['torch_ms']:6.1f}")
print(f"(medians; one forward pass of the {ids.shape[1]}-token prompt: {forward_ms:.0f} ms)")

body = {
    "prompt": args.prompt,
    "threads": torch.get_num_threads(),
    "rows": len(rows),
    "vocab": logits.shape[1],
    "differential": {"compared": compared, "mismatches": mismatches, "seeds": args.seeds,
                     "configs": {k: vars(v) for k, v in CONFIGS.items()}},
    "selection_cost_ms": costs,
    "forward_ms_prompt": forward_ms,
    "prompt_tokens": ids.shape[1],
}
path = save_results("ch02_samplers", body, device=str(loaded.model.device), notes=args.notes,
                    started=started, model={"manifest": loaded.manifest,
                                            "manifest_sha256": loaded.manifest_sha256})
print(f"wrote {path}")
