"""Percentiles, latency summaries and the report-only exit shared by the benchmarks."""

from __future__ import annotations

import argparse
import math
import traceback
from collections.abc import Callable, Sequence


def report_only(report: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    """Run a benchmark's report; if it breaks, say what broke and exit 0 all the same: a report,
    not a test."""
    try:
        report(args)
    except Exception as exc:
        traceback.print_exc()
        print(f"benchmark failed: {type(exc).__name__}: {exc} (report only: exiting 0)")
    return 0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def summary(values: Sequence[float]) -> dict:
    """n, p50, p95 and max of latencies in ms, rounded for a report."""
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "max": round(max(values), 3) if values else float("nan"),
    }
