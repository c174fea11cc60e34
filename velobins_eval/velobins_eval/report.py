"""Evaluation reports: ``metrics.json``, ``metrics.md`` and PNG plots, from flight records.

Used by ``velobins evaluate``, the eval node and the demo, so every report has the same layout:

* ``metrics.json``: ``{method: {"aggregate": {...}, "flights": {flight: {...}}}}`` with the keys
  ``net_ave, net_nll, ave, rte, ate, nees_median, nees_in_bounds`` (units in
  :class:`velobins_eval.metrics.FlightMetrics`); NaN (no such output) is written as ``null``;
* ``metrics.md``: one table, methods as rows, the aggregate (mean over flights), best per column
  in bold;
* ``plots/<flight>.png``: top view and altitude of every method against ground truth, network
  velocity error with its ±2σ band, and the per-update NEES against the χ²(3) bounds.

The pieces are shared with ``velobins reproduce`` (:mod:`velobins_eval.reproduce`), whose tables,
``metrics.json`` and figures use the same cell format, best-per-column rule, JSON writer and
plot helpers. The numbers come from :mod:`velobins_eval.scoring`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.outputs import atomic_path, atomic_write_text

from . import metrics
from .scoring import KEYS, aggregate, score

__all__ = [
    "HEADERS",
    "KEYS",
    "aggregate",
    "best_label",
    "format_value",
    "json_value",
    "markdown_table",
    "method_label",
    "metrics_entry",
    "plot_flight",
    "plot_trajectories",
    "pyplot",
    "render_table",
    "save_figure",
    "write_metrics_json",
    "write_report",
]

HEADERS = {
    "net_ave": "net AVE [m/s]",
    "net_nll": "net NLL [nats]",
    "ave": "AVE [m/s]",
    "rte": "RTE [m]",
    "ate": "ATE [m]",
    "nees_median": "NEES median",
    "nees_in_bounds": "NEES in 95 % bounds",
}
"""Column titles of the Markdown table."""

Cells = tuple[Mapping[str, float], Mapping[str, float] | None]
"""One table row: its values and their standard deviations over seeds (None: no ± shown)."""


def method_label(checkpoint: str | Path) -> str:
    """Report label of a checkpoint: its variant name (``reg``, ``G+H^B``, ...)."""
    from velobins_net.checkpoint import read_checkpoint

    return str(read_checkpoint(checkpoint)["variant"])


def json_value(x: float | None) -> float | None:
    """A metric as ``metrics.json`` stores it: rounded to 6 decimals, ``null`` for NaN or a missing value."""
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def metrics_entry(agg: Mapping[str, float], flights: Mapping[str, metrics.FlightMetrics]) -> dict[str, Any]:
    """One method of ``metrics.json``: ``{"aggregate": {key: value}, "flights": {flight: {key: value}}}``."""
    return {
        "aggregate": {k: json_value(v) for k, v in agg.items()},
        "flights": {f: {k: json_value(v) for k, v in fm.as_dict().items()} for f, fm in flights.items()},
    }


def write_metrics_json(path: Path, doc: dict[str, Any]) -> None:
    """Write a ``metrics.json`` document (methods -> :func:`metrics_entry` and extras) atomically."""
    atomic_write_text(path, json.dumps(doc, indent=1))


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
    """Best row of one column (NEES median: closest to the ideal in log ratio; in-bounds: highest; else lowest).

    None when fewer than two rows have a finite value (nothing to compare).
    """
    scored = {m: v for m, v in values.items() if math.isfinite(v)}
    if len(scored) < 2:
        return None
    if key == "nees_median":
        return min(scored, key=lambda m: abs(math.log(max(scored[m], 1e-12) / metrics.NEES_IDEAL_MEDIAN)))
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
    """``metrics.md``: methods as rows, aggregate metrics as columns, best per column in bold, and a footnote."""
    table = render_table({m: (agg, None) for m, agg in aggregates.items()}, KEYS)
    return (
        table + "\n\n"
        f"Mean over {flights} flight(s). AVE/RTE/ATE are EKF-fused (filter started from ground truth, no "
        f"alignment); net columns are the network alone; NEES is per update, 3 dof (ideal median "
        f"{metrics.NEES_IDEAL_MEDIAN:.3f}, bounds [{metrics.NEES_BOUNDS[0]:.3f}, {metrics.NEES_BOUNDS[1]:.3f}])."
    )


def write_report(
    records: dict[str, dict[str, Any]],
    gts: dict[str, Any],
    out_dir: str | Path,
    config: dict[str, Any] | None = None,
    plots: bool = True,
) -> str:
    """Score ``records[method][flight]`` against ``gts[flight]``; write JSON, Markdown, plots; return the table."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scored = {m: {f: score(r, gts[f]) for f, r in recs.items()} for m, recs in records.items()}
    aggregates = {m: aggregate(per) for m, per in scored.items()}
    write_metrics_json(out_dir / "metrics.json", {m: metrics_entry(aggregates[m], per) for m, per in scored.items()})
    if config is not None:
        atomic_write_text(out_dir / "config.json", json.dumps(config, indent=1, default=str))
    flights = len(gts)
    table = markdown_table(aggregates, flights)
    atomic_write_text(out_dir / "metrics.md", table + "\n")
    if plots:
        for flight in gts:
            plot_flight(
                {m: recs[flight] for m, recs in records.items() if flight in recs},
                gts[flight],
                out_dir / "plots" / f"{flight}.png",
            )
    return table


# ---------------------------------------------------------------------------------- plots


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files only; no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int) -> None:
    """Write ``fig`` as PNG to ``path`` atomically and close it (also when the write fails)."""
    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    finally:
        plt.close(fig)


def plot_trajectories(
    top: Any, alt: Any, gt_t: np.ndarray, gt_p: np.ndarray, tracks: Iterable[tuple[str, Any, str | None]]
) -> None:
    """Top view and altitude of the ground truth and of each ``(label, record, color)`` fused track.

    ``record`` is a :class:`~velobins_eval.scoring.FlightRecord` (its full-rate ``t_traj``,
    ``p_traj``); ``color`` None takes the axes' next colour. The axes follow the ground truth with
    a margin, so a diverging method (IMU-only) cannot squash the view.
    """
    t0 = gt_t[0]
    top.plot(gt_p[:, 0], gt_p[:, 1], "k-", lw=2, label="ground truth")
    alt.plot(gt_t - t0, gt_p[:, 2], "k-", lw=2, label="ground truth")
    for label, rec, color in tracks:
        top.plot(rec.p_traj[:, 0], rec.p_traj[:, 1], color=color, lw=1.2, label=label)
        alt.plot(rec.t_traj - t0, rec.p_traj[:, 2], color=color, lw=1.2, label=label)
    lo_p, hi_p = gt_p.min(axis=0), gt_p.max(axis=0)
    margin = np.maximum(0.5 * (hi_p - lo_p), 1.0)
    top.set(xlim=(lo_p[0] - margin[0], hi_p[0] + margin[0]), ylim=(lo_p[1] - margin[1], hi_p[1] + margin[1]))
    alt.set(ylim=(lo_p[2] - margin[2], hi_p[2] + margin[2]))
    top.set(title="top view", xlabel="x [m]", ylabel="y [m]", aspect="equal", adjustable="box")
    alt.set(title="altitude", xlabel="t [s]", ylabel="z [m]")


def plot_flight(records: dict[str, Any], gt, path: Path) -> None:
    """Trajectory top view and altitude, network velocity error ±2σ, and NEES over time."""
    plt = pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(12, 9))
    (top, alt), (verr, nees_ax) = ax
    plot_trajectories(top, alt, gt.t, gt.p, ((method, rec, None) for method, rec in records.items()))
    lo, hi = metrics.NEES_BOUNDS
    for method, rec in records.items():
        if np.all(np.isfinite(rec.var_net)):
            at = gt.at(rec.t)
            err = np.linalg.norm(rec.v_net - at.body_velocity, axis=1)
            band = 2.0 * np.sqrt(rec.var_net.sum(axis=1))
            line = verr.plot(rec.t - gt.t[0], err, lw=1.0, label=f"{method} |v̂ − v|")[0]
            verr.fill_between(rec.t - gt.t[0], 0, band, color=line.get_color(), alpha=0.15, label=f"{method} 2σ")
        if np.all(np.isfinite(rec.cov_fused)):
            at = gt.at(rec.t)
            values = metrics.nees(rec.v_fused - at.v, rec.cov_fused)
            nees_ax.semilogy(rec.t - gt.t[0], values, ".", ms=2, label=method)
    verr.set(title="network velocity error (body) with 2σ", xlabel="t [s]", ylabel="[m/s]")
    nees_ax.axhspan(lo, hi, color="green", alpha=0.1, label="χ²(3) 95 %")
    nees_ax.axhline(metrics.NEES_IDEAL_MEDIAN, color="green", lw=1, label="ideal median")
    nees_ax.set(title="per-update NEES of the fused velocity", xlabel="t [s]")
    for a in ax.flat:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.suptitle(path.stem)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
