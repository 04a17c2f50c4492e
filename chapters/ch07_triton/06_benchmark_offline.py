"""06 — chapter 7 against chapter 6, offline: the same graph-replayed decode step, PyTorch's
kernels against ours.

Greedy decoding of the seed book's prompt, --tokens output tokens per request (EOS ignored),
--warmup runs discarded (the warm-up also autotunes the kernels and captures the graphs), then
--runs rounds in which each engine runs once, the order rotating. Prints both single-stream tables,
the speed ratio with its spread over the rounds, and whether the tokens are identical. Writes
results/cpu/ch07_offline.json (results/gpu/ or $OUT on a GPU) and a plot.

    python 06_benchmark_offline.py
    python chapters/ch07_triton/06_benchmark_offline.py --runs 5 --tokens 256

Hypothesis: on a GPU well above 1, because chapter 6's step is ~1,500 kernels of a few
microseconds each and ours is a few hundred. On a CPU exactly the same code runs twice (the engine
falls back to chapter 6's path there; the table's implementation column says so), so a ratio of 1
within noise is the expected result, not a finding. gpu_engines.py adds the library baselines.
"""

from chapters.ch06_profiling.engine import CudaGraphEngine
from chapters.ch07_triton.engine import TritonEngine
from shared.benchmark import offline_args, offline_main
from shared.model import load_model

if __name__ == "__main__":
    args = offline_args(__doc__)
    loaded = load_model(args.model)
    engines = [CudaGraphEngine(loaded), TritonEngine(loaded)]
    offline_main(args, engines, name="ch07_offline", labels=["ch06_cuda_graph", "ch07_triton"])
