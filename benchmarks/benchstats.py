"""Statistics and machine facts shared by the benchmarks that compare implementations in one run."""

from __future__ import annotations

import platform
import statistics


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile)."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def paired_ratio(runs: dict[str, list[float]], num: str, den: str) -> tuple[float, float, float]:
    """Quartiles of the per-round ratio num ÷ den (the same round's timings, so load hits both alike)."""
    return quartiles([a / b for a, b in zip(runs[num], runs[den], strict=True)])


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo where there is one): figures differ between machines."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
