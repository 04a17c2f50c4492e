"""06 — chapter 2 against chapter 1, offline: both engines in-process, measured alternately.

Greedy decoding of the seed book's prompt, --tokens output tokens per request (EOS ignored, so
every run does the same work), --warmup runs discarded, then --runs rounds in which each engine
runs once, the order rotating. Prints both engines' single-stream tables, the speed-up of chapter 2
over chapter 1 with its spread over the rounds, and whether chapter 2's tokens equal chapter 1's.
Writes results/cpu/ch02_offline.json (results/gpu/ on a GPU) and a plot.

    python 06_benchmark_offline.py
    python chapters/ch02_generate_loop/06_benchmark_offline.py --runs 3 --tokens 64 --threads 1

Expect chapter 2 to be slower: Hugging Face's `generate()` keeps a KV cache, our loop does not.
"""

from chapters.ch01_baseline.engine import BaselineEngine
from chapters.ch02_generate_loop.engine import GenerateLoopEngine
from shared.benchmark import offline_args, offline_main
from shared.model import load_model

if __name__ == "__main__":
    args = offline_args(__doc__)
    loaded = load_model(args.model)  # one copy of the weights for both engines
    engines = [BaselineEngine(loaded), GenerateLoopEngine(loaded)]
    offline_main(args, engines, name="ch02_offline", labels=["ch01_baseline", "ch02_generate_loop"])
