"""01 — prefill and decode: without a cache, every step costs more than the one before.

The first step of a request (the prefill) runs the whole prompt through the model and yields the
first token: its time is the time to first token (TTFT). Every later step (a decode step) yields
one more token; their average is the time per output token (TPOT). Chapter 2 keeps no KV cache, so
decode step t runs prompt + t positions, all of them again.

Hypothesis: a step's forward time grows with the number of positions it runs, about linearly at
these lengths (the matrix multiplications dominate; attention's quadratic part is small), so TPOT
is not a constant of the model but grows with the length of the reply. Falsified if the time were
flat in the number of positions.

Two measurements:

1. One request through the engine (greedy, EOS ignored), timing its `next_logits` hook at every
   step: TTFT, TPOT, positions processed, and each step's time.
2. A sweep: the very call a decode step makes, at 16 to 512 positions, each length timed in every
   round with the order shuffled per round, so a change in the machine's load (it is shared) lands
   on all lengths alike instead of on the late, long steps. Median and spread per length, and a
   least-squares line.

Writes results/cpu/ch02_prefill_decode.json and .png (results/gpu/ on a GPU).

Run it:  python 01_prefill_decode.py                       (about 2 minutes on a 2-core CPU)
         python 01_prefill_decode.py --tokens 32 --rounds 3 --threads 1
"""

import random
import statistics
import time

import torch

from chapters.ch02_generate_loop.engine import GenerateLoopEngine, Sequence
from shared import config
from shared.benchmark import save_results
from shared.benchmark.cli import parse_script, script_parser
from shared.contracts import SamplingParams

parser = script_parser(__doc__)
parser.add_argument("--prompt", default=config.PROMPT)
parser.add_argument("--tokens", type=int, default=64, help="output tokens (default %(default)s)")
parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 384, 512],
                    help="positions per forward in the sweep (default %(default)s)")
parser.add_argument("--rounds", type=int, default=5, help="rounds of the sweep (default %(default)s)")
args, started = parse_script(parser)


class StepTimedEngine(GenerateLoopEngine):
    """Chapter 2's engine, recording (positions run, milliseconds) for every step."""

    def __init__(self, model: str | None) -> None:
        super().__init__(model)
        self.steps: list[tuple[int, float]] = []

    def next_logits(self, seq: Sequence) -> tuple[torch.Tensor, int]:
        start = time.perf_counter()
        logits, positions = super().next_logits(seq)
        self._synchronize()  # on a GPU, wait for the kernels before reading the clock
        self.steps.append((positions, (time.perf_counter() - start) * 1000))
        return logits, positions


engine = StepTimedEngine(args.model)
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
engine.generate(args.prompt, SamplingParams(temperature=0.0, max_tokens=4))  # warm-up, discarded

# ---- 1. one request: TTFT, TPOT, positions, each step's forward time ---------------------------
engine.steps = []
result = engine.generate(args.prompt, params)
m = result.metrics
steps = list(engine.steps)  # the sweep below calls next_logits too
print(f"prompt {m.input_tokens} tokens, {m.output_tokens} new tokens, {m.positions_processed} positions "
      f"processed ({m.positions_processed / m.output_tokens:.1f} per token)")
print(f"TTFT {m.ttft_ms:.1f} ms   TPOT {m.tpot_ms:.1f} ms   total {m.total_ms / 1000:.1f} s")
print(f"forward {m.forward_ms / 1000:.2f} s + selection {m.selection_ms:.1f} ms + other {m.other_ms:.1f} ms")

# ---- 2. the sweep: one decode step's forward at each length, shuffled rounds --------------------
ids = engine.encode(args.prompt) + result.output_ids
ids = (ids * (max(args.lengths) // len(ids) + 1))[: max(args.lengths)]  # any tokens will do for timing
times: dict[int, list[float]] = {n: [] for n in args.lengths}
rng = random.Random(0)
for _ in range(args.rounds):
    order = list(args.lengths)
    rng.shuffle(order)
    for n in order:
        seq = Sequence(ids[:n], n)
        with torch.inference_mode():
            start = time.perf_counter()
            engine.next_logits(seq)
            engine._synchronize()
            times[n].append((time.perf_counter() - start) * 1000)
median = {n: statistics.median(t) for n, t in times.items()}
# Least-squares line through the medians: ms = intercept + slope * positions.
x = torch.tensor(args.lengths, dtype=torch.float64)
A = torch.stack([torch.ones_like(x), x], dim=1)
y = torch.tensor([median[n] for n in args.lengths], dtype=torch.float64)
intercept, slope = torch.linalg.lstsq(A, y[:, None]).solution[:, 0].tolist()
print(f"\n{'positions':>9s} {'median ms':>10s} {'min ms':>8s} {'max ms':>8s}")
for n in args.lengths:
    print(f"{n:9d} {median[n]:10.1f} {min(times[n]):8.1f} {max(times[n]):8.1f}")
print(f"line: {intercept:.1f} ms + {slope:.3f} ms per position; "
      f"{max(args.lengths)} positions take {median[max(args.lengths)] / median[min(args.lengths)]:.1f}x "
      f"as long as {min(args.lengths)}")

body = {
    "prompt": args.prompt,
    "params": vars(params),
    "threads": torch.get_num_threads(),
    "request": {"metrics": m.as_dict(),
                "steps": [{"step": i, "positions": p, "forward_ms": t} for i, (p, t) in enumerate(steps)]},
    "sweep": {"rounds": args.rounds, "order": "shuffled per round",
              "lengths": [{"positions": n, "median_ms": median[n], "min_ms": min(times[n]),
                           "max_ms": max(times[n]), "runs_ms": times[n]} for n in args.lengths],
              "fit": {"intercept_ms": intercept, "ms_per_position": slope}},
    "engine": engine.provenance(),
}
path = save_results("ch02_prefill_decode", body, device=str(engine.device), notes=args.notes,
                    started=started, model={"manifest": engine.loaded.manifest,
                                            "manifest_sha256": engine.loaded.manifest_sha256})

import matplotlib  # noqa: E402  (only needed for the plot)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(7, 4))
lo = [median[n] - min(times[n]) for n in args.lengths]
hi = [max(times[n]) - median[n] for n in args.lengths]
ax.errorbar(args.lengths, [median[n] for n in args.lengths], yerr=[lo, hi], fmt="o", capsize=3,
            label=f"sweep: median, min-max of {args.rounds} shuffled rounds")
ax.plot(args.lengths, [intercept + slope * n for n in args.lengths], "-", label="least-squares line")
ax.plot([p for p, _ in steps[1:]], [t for _, t in steps[1:]], ".", alpha=0.4,
        label=f"one request's decode steps ({m.output_tokens} tokens)")
ax.plot([steps[0][0]], [steps[0][1]], "s", label="its prefill (step 0)")
ax.set_xlabel("positions run by the step (prompt + tokens so far)")
ax.set_ylabel("forward time (ms)")
ax.set_title(f"ch02, no KV cache: forward time per step ({engine.device}, {torch.get_num_threads()} thread(s))",
             fontsize=10)
ax.set_ylim(bottom=0)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(path.with_suffix(".png"), dpi=120)
print(f"wrote {path} and {path.with_suffix('.png')}")
