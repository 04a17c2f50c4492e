"""01 — prefill and decode: without a cache, every step costs more than the one before.

The first step of a request (the prefill) runs the whole prompt through the model and yields the
first token: its time is the time to first token (TTFT). Every later step (a decode step) yields
one more token; their average is the time per output token (TPOT). Chapter 2 keeps no KV cache, so
decode step t runs prompt + t positions, all of them again.

Hypothesis: the forward time of a step grows with the number of positions it runs, about linearly
at these lengths (the matrix multiplications dominate; attention's quadratic part is small here),
so TPOT is not a constant of the model but grows with the length of the reply. Held constant: the
prompt, greedy decoding, EOS ignored. Varied: the step. Falsified if the per-step time were flat.

The script subclasses the engine to time its `next_logits` hook per step, fits a line to
time against positions, plots it, and writes results/cpu/ch02_prefill_decode.json and .png
(results/gpu/ on a GPU).

Run it:  python 01_prefill_decode.py                       (about 2 minutes on a 2-core CPU)
         python 01_prefill_decode.py --tokens 64 --threads 1
"""

import argparse
import time

import torch

from chapters.ch02_generate_loop.engine import GenerateLoopEngine, Sequence
from shared import config
from shared.benchmark import provenance, save_results
from shared.contracts import SamplingParams

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--prompt", default=config.PROMPT)
parser.add_argument("--tokens", type=int, default=128, help="output tokens (default %(default)s)")
parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
parser.add_argument("--model", default=None, help="a .gguf path, a local folder or a Hugging Face id")
parser.add_argument("--notes", default="", help="free text stored with the results")
args = parser.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)
started = provenance(args.notes)


class StepTimedEngine(GenerateLoopEngine):
    """Chapter 2's engine, recording (positions run, milliseconds) for every step."""

    def __init__(self, model: str | None) -> None:
        super().__init__(model)
        self.steps: list[tuple[int, float]] = []

    def next_logits(self, seq: Sequence) -> tuple[torch.Tensor, int]:
        start = time.perf_counter()
        logits, positions = super().next_logits(seq)
        self.steps.append((positions, (time.perf_counter() - start) * 1000))
        return logits, positions


engine = StepTimedEngine(args.model)
params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
engine.generate(args.prompt, SamplingParams(temperature=0.0, max_tokens=4))  # warm-up, discarded
engine.steps = []
result = engine.generate(args.prompt, params)
m = result.metrics

positions = [p for p, _ in engine.steps]
ms = [t for _, t in engine.steps]
# Least-squares line through the decode steps: ms = intercept + slope * positions.
decode_p, decode_ms = torch.tensor(positions[1:], dtype=torch.float64), torch.tensor(ms[1:], dtype=torch.float64)
A = torch.stack([torch.ones_like(decode_p), decode_p], dim=1)
intercept, slope = torch.linalg.lstsq(A, decode_ms[:, None]).solution[:, 0].tolist()
quarter = max(1, len(ms) // 4)
first_q, last_q = sum(ms[1 : 1 + quarter]) / quarter, sum(ms[-quarter:]) / quarter

print(f"prompt {m.input_tokens} tokens, {m.output_tokens} new tokens, {m.positions_processed} positions "
      f"processed ({m.positions_processed / m.output_tokens:.1f} per token)")
print(f"TTFT {m.ttft_ms:.1f} ms   TPOT {m.tpot_ms:.1f} ms   total {m.total_ms / 1000:.1f} s")
print(f"forward {m.forward_ms / 1000:.2f} s + selection {m.selection_ms:.1f} ms + other {m.other_ms:.1f} ms")
print(f"decode step: first quarter {first_q:.1f} ms, last quarter {last_q:.1f} ms "
      f"({last_q / first_q:.2f}x); fit {intercept:.1f} ms + {slope:.3f} ms/position")

body = {
    "prompt": args.prompt,
    "params": vars(params),
    "threads": torch.get_num_threads(),
    "metrics": m.as_dict(),
    "steps": [{"step": i, "positions": p, "forward_ms": t} for i, (p, t) in enumerate(engine.steps)],
    "decode_fit": {"intercept_ms": intercept, "ms_per_position": slope},
    "decode_first_quarter_mean_ms": first_q,
    "decode_last_quarter_mean_ms": last_q,
    "engine": engine.provenance(),
}
path = save_results("ch02_prefill_decode", body, device=str(engine.device), notes=args.notes,
                    started=started, model={"manifest": engine.loaded.manifest,
                                            "manifest_sha256": engine.loaded.manifest_sha256})

import matplotlib  # noqa: E402  (only needed for the plot)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(positions[1:], ms[1:], ".", label="decode step (measured)")
ax.plot(positions[:1], ms[:1], "s", label="prefill (step 0)")
ax.plot(positions[1:], [intercept + slope * p for p in positions[1:]], "-", label="least-squares line")
ax.set_xlabel("positions run by the step (prompt + tokens so far)")
ax.set_ylabel("forward time (ms)")
ax.set_title(f"ch02, no KV cache: per-step forward time ({engine.device}, {torch.get_num_threads()} thread(s))")
ax.set_ylim(bottom=0)
ax.legend()
fig.tight_layout()
fig.savefig(path.with_suffix(".png"), dpi=120)
print(f"wrote {path} and {path.with_suffix('.png')}")
