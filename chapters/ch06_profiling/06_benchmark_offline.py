"""06 — chapter 6 against chapter 4, offline: the same cached decode, eager against graph-replayed.

Greedy decoding of the seed book's prompt, --tokens output tokens per request (EOS ignored),
--warmup runs discarded (the warm-up also captures the graph), then --runs rounds in which each
engine runs once, the order rotating. Prints both single-stream tables, the speed ratio with its
spread over the rounds, and whether the tokens are identical. Writes results/cpu/ch06_offline.json
(results/gpu/ on a GPU) and a plot.

    python 06_benchmark_offline.py
    python chapters/ch06_profiling/06_benchmark_offline.py --runs 5 --tokens 256 --threads 1

Hypothesis: on a CPU a ratio near 1 (there is no graph to replay: the same ops run eagerly, over a
cache a little longer than chapter 4's); on a GPU well above 1, because the eager step's time is
mostly the host launching kernels. A GPU ratio near 1 would mean the host was not the bottleneck.
"""

from chapters.ch04_kv_cache.engine import KVCacheEngine
from chapters.ch06_profiling.engine import CudaGraphEngine
from shared.benchmark import offline_args, offline_main
from shared.model import load_model

if __name__ == "__main__":
    args = offline_args(__doc__)
    loaded = load_model(args.model)
    engines = [KVCacheEngine(loaded), CudaGraphEngine(loaded)]
    offline_main(args, engines, name="ch06_offline", labels=["ch04_kv_cache", "ch06_cuda_graph"])
