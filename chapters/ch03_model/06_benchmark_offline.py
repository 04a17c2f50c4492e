"""06 — chapter 3 against chapter 2, offline: the same loop over two implementations of the model.

Both engines run chapter 2's loop without a KV cache; one calls the Hugging Face model's forward,
the other our hand-written one. Greedy decoding of the seed book's prompt, --tokens output tokens
per request (EOS ignored), --warmup runs discarded, then --runs rounds in which each engine runs
once, the order rotating. Prints both single-stream tables, chapter 3's speed relative to
chapter 2 with its spread over the rounds, and whether the tokens are identical.
Writes results/cpu/ch03_offline.json (results/gpu/ on a GPU) and a plot.

    python 06_benchmark_offline.py
    python chapters/ch03_model/06_benchmark_offline.py --runs 5 --tokens 32 --threads 1

Hypothesis: a ratio near 1. Both do the same matrix products through the same torch kernels; a
ratio far from 1 would mean one of them does extra work (or skips some).
"""

from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from chapters.ch03_model.engine import ModelEngine
from shared.benchmark import offline_args, offline_main
from shared.model import load_model

if __name__ == "__main__":
    args = offline_args(__doc__)
    loaded = load_model(args.model)  # one load; chapter 3's engine loads the weights by name
    engines = [GenerateLoopEngine(loaded), ModelEngine(loaded)]
    offline_main(args, engines, name="ch03_offline", labels=["ch02_generate_loop", "ch03_model"])
