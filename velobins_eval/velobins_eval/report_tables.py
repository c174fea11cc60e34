"""The report's tables: column titles, cells, the best row per column, Markdown tables (aggregate, labelled
additions, per flight) and the filter parameters of each row.

Shared by :mod:`velobins_eval.report` (``metrics.md``, ``report.md``), :mod:`velobins_eval.report_html` (the
same tables in HTML), the demo and ``velobins reproduce`` (:mod:`velobins_eval.reproduce.tables`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from . import metrics
from .scoring import KEYS

HEADERS = {
    "net_ave": "net AVE [m/s]",
    "net_nll": "net NLL [nats]",
    "ave": "AVE [m/s]",
    "rte": "RTE [m]",
    "ate": "ATE [m]",
    "nees_median": "NEES median",
    "nees_in_bounds": "NEES in 95 % bounds",
    "ate_yaw": "ATE yaw-aligned [m]",
    "ate_se3": "ATE SE(3)-aligned [m]",
    "rot_rms": "rot. RMS [°]",
    "yaw_final": "final yaw err. [°]",
    "ave_body": "AVE body [m/s]",
    "nees_mean": "NEES mean",
    "fused_nll": "NLL fused [nats]",
}
"""Column titles of the Markdown and HTML tables."""

EXTRA_TABLE_KEYS = (
    "ate",
    "ate_yaw",
    "ate_se3",
    "rot_rms",
    "yaw_final",
    "ave",
    "ave_body",
    "nees_median",
    "nees_mean",
    "fused_nll",
)
"""Columns of the second table: ATE beside its aligned variants, orientation, AVE beside the body-frame AVE,
the NEES median beside its mean, and the fused velocity's log score."""
PER_FLIGHT_TABLE_KEYS = (
    "ave",
    "ave_body",
    "rte",
    "ate",
    "ate_yaw",
    "ate_se3",
    "rot_rms",
    "yaw_final",
    "nees_median",
    "nees_mean",
    "nees_in_bounds",
    "fused_nll",
)
"""Columns of the per-flight tables (fused figures; the network's are in the aggregate table)."""

Cells = tuple[Mapping[str, float], Mapping[str, float] | None]
"""One table row: its values and their standard deviations over seeds (None: no ± shown)."""


def format_value(key: str, value: float, std: float | None = None, digits: int = 3) -> str:
    """Table cell of one metric: ``—`` for NaN, the NEES share in percent, else ``digits`` decimals; ``± std``
    when a finite standard deviation is given."""
    if not math.isfinite(value):
        return "—"
    if key == "nees_in_bounds":
        text = f"{value:.1%}"
        return text + (f" ± {std:.1%}" if std is not None and math.isfinite(std) else "")
    text = f"{value:.{digits}f}"
    return text + (f" ± {std:.{digits}f}" if std is not None and math.isfinite(std) else "")


def best_label(values: Mapping[str, float], key: str) -> str | None:
    """Best row of one column (NEES median / mean: closest to the ideal in log ratio; in-bounds: highest; else lowest).

    None when fewer than two rows have a finite value (nothing to compare).
    """
    scored = {m: v for m, v in values.items() if math.isfinite(v)}
    if len(scored) < 2:
        return None
    if key in ("nees_median", "nees_mean"):
        ideal = metrics.NEES_IDEAL_MEDIAN if key == "nees_median" else float(metrics.NEES_DOF)
        return min(scored, key=lambda m: abs(math.log(max(scored[m], 1e-12) / ideal)))
    if key == "nees_in_bounds":
        return max(scored, key=scored.get)
    return min(scored, key=scored.get)


def render_table(
    rows: Mapping[str, Cells],
    keys: Iterable[str],
    headers: Mapping[str, str] = HEADERS,
    digits: Mapping[str, int] | None = None,
) -> str:
    """Markdown table: label -> (values, std or None) as rows, ``keys`` as columns, best per column in bold.

    ``digits`` gives the decimals of a column (default 3; the NEES share is always a percentage).
    """
    keys = tuple(keys)
    digits = digits or {}
    best = {k: best_label({m: v[k] for m, (v, _) in rows.items()}, k) for k in keys}
    lines = ["| method | " + " | ".join(headers[k] for k in keys) + " |", "|---|" + "---|" * len(keys)]
    for label, (values, std) in rows.items():
        cells = []
        for k in keys:
            text = format_value(k, values[k], std[k] if std else None, digits.get(k, 3))
            cells.append(f"**{text}**" if best[k] == label else text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(aggregates: dict[str, dict[str, float]], flights: int) -> str:
    """``metrics.md``: the paper's table (methods as rows, aggregate metrics as columns, best per column in bold)
    and its footnote, then the table of the labelled additions (when the rows have them)."""
    table = render_table(_cells(aggregates), KEYS)
    text = (
        table + "\n\n"
        f"Mean over {flights} flight(s). AVE/RTE/ATE are EKF-fused (filter started from ground truth, no "
        f"alignment); net columns are the network alone; NEES is per update, 3 dof (ideal median "
        f"{metrics.NEES_IDEAL_MEDIAN:.3f}, bounds [{metrics.NEES_BOUNDS[0]:.3f}, {metrics.NEES_BOUNDS[1]:.3f}])."
    )
    if all(all(k in agg for k in EXTRA_TABLE_KEYS) for agg in aggregates.values()):
        text += "\n\n" + extra_table(aggregates)
    return text


def _cells(aggregates: Mapping[str, Mapping[str, float]]) -> dict[str, Cells]:
    return {m: (agg, None) for m, agg in aggregates.items()}


def extra_table(aggregates: Mapping[str, Mapping[str, float]]) -> str:
    """The labelled additions beside the paper's ATE, AVE and NEES median, with their footnote."""
    return (
        render_table(_cells(aggregates), EXTRA_TABLE_KEYS)
        + "\n\nATE yaw-aligned / SE(3)-aligned: after the best yaw + translation (4-DoF) / rotation + translation "
        "fit of the whole trajectory; rot. RMS: RMS angle of the attitude error; final yaw err.: heading error at "
        "the last update; AVE body: fused velocity error in the body frame (no heading drift); NEES mean: ideal 3; "
        "NLL fused: log score of the fused velocity under its covariance, accuracy and fit together, lower is better "
        "(docs/metrics.md)."
    )


def per_flight_table(doc: Mapping[str, Mapping[str, Any]], flights: list[str], keys=PER_FLIGHT_TABLE_KEYS) -> str:
    """Markdown table of ``keys`` per flight and method from a ``metrics.json`` document (best per flight in bold)."""
    lines = [
        "| flight | method | " + " | ".join(HEADERS[k] for k in keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for flight in flights:
        values = {
            m: {k: _nan(d["flights"][flight].get(k)) for k in keys} for m, d in doc.items() if flight in d["flights"]
        }
        best = {k: best_label({m: v[k] for m, v in values.items()}, k) for k in keys}
        for method, v in values.items():
            cells = [format_value(k, v[k]) for k in keys]
            cells = [f"**{c}**" if best[k] == method else c for k, c in zip(keys, cells, strict=True)]
            lines.append(f"| {flight} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def filters_markdown(filters: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per row: the parameter files it loaded and the filter / predictor values that differ from the
    defaults (``filters[method]`` as :func:`velobins_eval.evaluate.filter_summary` gives it)."""
    lines = []
    for method, f in filters.items():
        files = ", ".join(f"`{p}`" for p in f.get("params", [])) or "none (defaults)"
        changed = {**f.get("filter", {}), **{f"predictor.{k}": v for k, v in f.get("predictor", {}).items()}}
        values = ", ".join(f"{k} {v}" for k, v in changed.items()) or "all defaults"
        source = f" ({f['source']})" if f.get("source") else ""
        lines.append(f"- **{method}**: parameter files {files}{source}; differs from the defaults: {values}")
    return "\n".join(lines)
