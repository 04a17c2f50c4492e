"""06 — chapter 8 against chapter 7, offline: the same decode step, the prefill's attention
swapped for the flash kernel.

Greedy decoding of --prompt (default: the seed book's prompt), --tokens output tokens per request
(EOS ignored), --warmup runs discarded, then --runs rounds in which each engine runs once, the
order rotating. Prints both single-stream tables (TTFT is where the difference would show), the
ratio with its spread, and whether the tokens are identical. Writes results/cpu/ch08_offline.json
(results/gpu/ or $OUT on a GPU) and a plot.

    python 06_benchmark_offline.py
    python chapters/ch08_flash_attention/06_benchmark_offline.py --runs 5 --tokens 64

Hypothesis: for a prompt of a few dozen tokens, no difference beyond noise: its attention is a
sliver of the prefill. The long-prompt comparison (512 to 8,191 tokens) is in
chapters/ch07_triton/gpu_engines.py. On a CPU both engines run chapter 6's path (see their
implementation column), so the ratio is 1 by construction.
"""

from chapters.ch07_triton.engine import TritonEngine
from chapters.ch08_flash_attention.engine import FlashAttentionEngine
from shared.benchmark import offline_args, offline_main
from shared.model import load_model

if __name__ == "__main__":
    args = offline_args(__doc__)
    loaded = load_model(args.model)
    engines = [TritonEngine(loaded), FlashAttentionEngine(loaded)]
    offline_main(args, engines, name="ch08_offline", labels=["ch07_triton", "ch08_flash_attention"])
