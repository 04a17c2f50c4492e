"""Summary statistics for benchmark samples: mean, percentiles and spread.

Percentiles use linear interpolation between the closest ranks (numpy's default, "linear"), so
p50 of [1, 2, 3, 4] is 2.5 and p99 of a few samples lies just below the largest. With fewer than
about 100 samples a p99 is close to the maximum and says little: the sample count is kept next to
every summary so a reader can judge.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) of `values`, linearly interpolated."""
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q!r}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """count, mean, std (sample; 0 for one value), min, max and p50/p90/p99. Empty -> {"count": 0}:
    a quantity that was not measured is reported as absent, never as zero."""
    if not values:
        return {"count": 0}
    out = {
        "count": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }
    out.update({f"p{q}": percentile(values, q) for q in PERCENTILES})
    return out
