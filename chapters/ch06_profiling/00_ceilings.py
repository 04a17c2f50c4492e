"""Measure this machine's ceilings: memory bandwidth, matmul throughput, the ridge point between
them, and the cost of one tiny op. Writes results/cpu/ch06_ceilings.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/00_ceilings.py [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import argparse

from chapters.ch06_profiling import ceilings
from chapters.ch06_profiling.report import write_json
from shared.config import DEVICE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (default 1: the cores are shared; see ceilings.pin_threads)")
    args = parser.parse_args()
    ceilings.pin_threads(args.device, args.threads)
    result = ceilings.measure(args.device)
    path = write_json("ch06_ceilings.json", result, args.device)
    print(f"wrote {path}")
    print(ceilings.table(result))


if __name__ == "__main__":
    main()
