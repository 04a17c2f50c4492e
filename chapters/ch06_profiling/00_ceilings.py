"""Measure this machine's ceilings: memory bandwidth, matmul throughput, the ridge point between
them, and the cost of one tiny op. Writes results/cpu/ch06_ceilings.json (or $OUT/ on a GPU).

    python chapters/ch06_profiling/00_ceilings.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse

from chapters.ch06_profiling import ceilings
from chapters.ch06_profiling.report import write_json
from shared.config import DEVICE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=DEVICE)
    args = parser.parse_args()
    result = ceilings.measure(args.device)
    path = write_json("ch06_ceilings.json", result, args.device)
    print(f"wrote {path}")
    print(ceilings.table(result))


if __name__ == "__main__":
    main()
