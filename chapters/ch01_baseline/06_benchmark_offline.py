"""Chapter 1's offline benchmark: BaselineEngine called in-process, no server, no HTTP.

Greedy decoding of the seed book's prompt, --tokens output tokens per request (EOS ignored, so
every run does the same work), --warmup runs discarded, then --runs measured runs. Prints the
single-stream table (tokens, time, tok/s, TTFT, TPOT) and the latency percentiles, and writes
results/cpu/ch01_offline.json (results/gpu/ on a GPU) with a plot next to it.

    python 06_benchmark_offline.py
    python chapters/ch01_baseline/06_benchmark_offline.py --runs 5 --tokens 128 --threads 1

TTFT and TPOT are measured by the harness from the engine's token stream: `generate()` itself
reports neither, but chapter 1's engine streams each token out of its worker thread as it is made.
"""

from chapters.ch01_baseline.engine import BaselineEngine
from shared.benchmark import offline_args, offline_main

if __name__ == "__main__":
    args = offline_args(__doc__)
    offline_main(args, [BaselineEngine(args.model)], name="ch01_offline")
