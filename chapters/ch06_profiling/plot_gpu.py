"""Draw chapter 6's plots from the H200's JSON, here (the GPU machine has no matplotlib):
results/gpu/ch06_gpu.json -> results/gpu/ch06_{roofline,prefill_vs_decode,decode_by_batch}.png.

    python chapters/ch06_profiling/plot_gpu.py [path/to/ch06_gpu.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from chapters.ch06_profiling import plots
from chapters.ch06_profiling.report import REPO


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "results" / "gpu" / "ch06_gpu.json"
    result = json.loads(path.read_text())["roofline"]
    folder = path.parent
    drawn = [plots.roofline(result, folder / "ch06_roofline.png"),
             plots.by_length(result, folder / "ch06_prefill_vs_decode.png"),
             plots.by_batch(result, folder / "ch06_decode_by_batch.png")]
    print("wrote", [str(p) for p in drawn if p is not None] or "nothing (matplotlib is missing)")


if __name__ == "__main__":
    main()
