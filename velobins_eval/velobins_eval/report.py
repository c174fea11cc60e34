"""Evaluation reports: ``metrics.json``, ``metrics.md`` and PNG plots, from flight records.

Used by ``velobins evaluate``, the eval node and the demo, so every report has the same layout:

* ``metrics.json``: ``{method: {"aggregate": {...}, "flights": {flight: {...}}}}`` with the keys
  ``net_ave, net_nll, ave, rte, ate, nees_median, nees_in_bounds`` (units in
  :class:`velobins_eval.metrics.FlightMetrics`); NaN (no such output) is written as ``null``;
* ``metrics.md``: one table, methods as rows, the aggregate (mean over flights), best per column
  in bold;
* ``plots/<flight>.png``: top view and altitude of every method against ground truth, network
  velocity error with its ±2σ band, and the per-update NEES against the χ²(3) bounds.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from velobins_net.outputs import atomic_path, atomic_write_text

from . import metrics

KEYS = tuple(f.name for f in fields(metrics.FlightMetrics))
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


def method_label(checkpoint: str | Path) -> str:
    """Report label of a checkpoint: its variant name (``reg``, ``G+H^B``, ...)."""
    from velobins_net.checkpoint import read_checkpoint

    return str(read_checkpoint(checkpoint)["variant"])


def aggregate(per_flight: dict[str, metrics.FlightMetrics]) -> dict[str, float]:
    """Mean over flights of each metric (NaN-aware; NaN when no flight has it)."""
    out = {}
    for key in KEYS:
        values = np.array([getattr(m, key) for m in per_flight.values()], dtype=float)
        out[key] = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
    return out


def _json_value(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def markdown_table(aggregates: dict[str, dict[str, float]], flights: int) -> str:
    """Methods as rows, aggregate metrics as columns; best per column in bold (NEES: closest to ideal)."""
    best: dict[str, str] = {}
    for key in KEYS:
        scored = {m: a[key] for m, a in aggregates.items() if math.isfinite(a[key])}
        if len(scored) < 2:
            continue
        if key == "nees_median":
            best[key] = min(scored, key=lambda m: abs(math.log(scored[m] / metrics.NEES_IDEAL_MEDIAN)))
        elif key == "nees_in_bounds":
            best[key] = max(scored, key=scored.get)
        else:
            best[key] = min(scored, key=scored.get)
    lines = [
        "| method | " + " | ".join(HEADERS[k] for k in KEYS) + " |",
        "|---|" + "---|" * len(KEYS),
    ]
    for method, agg in aggregates.items():
        cells = []
        for key in KEYS:
            value = agg[key]
            text = "—" if not math.isfinite(value) else (f"{value:.1%}" if key == "nees_in_bounds" else f"{value:.3f}")
            cells.append(f"**{text}**" if best.get(key) == method else text)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Mean over {flights} flight(s). AVE/RTE/ATE are EKF-fused (filter started from ground truth, no "
        f"alignment); net columns are the network alone; NEES is per update, 3 dof (ideal median "
        f"{metrics.NEES_IDEAL_MEDIAN:.3f}, bounds [{metrics.NEES_BOUNDS[0]:.3f}, {metrics.NEES_BOUNDS[1]:.3f}])."
    )
    return "\n".join(lines)


def write_report(
    records: dict[str, dict[str, Any]],
    gts: dict[str, Any],
    out_dir: str | Path,
    config: dict[str, Any] | None = None,
    plots: bool = True,
) -> str:
    """Score ``records[method][flight]`` against ``gts[flight]``; write JSON, Markdown, plots; return the table."""
    from .evaluate import score

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scored = {m: {f: score(r, gts[f]) for f, r in recs.items()} for m, recs in records.items()}
    aggregates = {m: aggregate(per) for m, per in scored.items()}
    doc = {
        m: {
            "aggregate": {k: _json_value(v) for k, v in aggregates[m].items()},
            "flights": {f: {k: _json_value(v) for k, v in fm.as_dict().items()} for f, fm in per.items()},
        }
        for m, per in scored.items()
    }
    atomic_write_text(out_dir / "metrics.json", json.dumps(doc, indent=1))
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


def plot_flight(records: dict[str, Any], gt, path: Path) -> None:
    """Trajectory top view and altitude, network velocity error ±2σ, and NEES over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(2, 2, figsize=(12, 9))
    (top, alt), (verr, nees_ax) = ax
    top.plot(gt.p[:, 0], gt.p[:, 1], "k-", lw=2, label="ground truth")
    alt.plot(gt.t - gt.t[0], gt.p[:, 2], "k-", lw=2, label="ground truth")
    lo, hi = metrics.NEES_BOUNDS
    for method, rec in records.items():
        top.plot(rec.p_traj[:, 0], rec.p_traj[:, 1], lw=1.2, label=method)
        alt.plot(rec.t_traj - gt.t[0], rec.p_traj[:, 2], lw=1.2, label=method)
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
    # Axes follow the ground truth (with a margin) so a diverging method cannot squash the view.
    lo_p, hi_p = gt.p.min(axis=0), gt.p.max(axis=0)
    margin = np.maximum(0.5 * (hi_p - lo_p), 1.0)
    top.set(xlim=(lo_p[0] - margin[0], hi_p[0] + margin[0]), ylim=(lo_p[1] - margin[1], hi_p[1] + margin[1]))
    alt.set(ylim=(lo_p[2] - margin[2], hi_p[2] + margin[2]))
    top.set(title="top view", xlabel="x [m]", ylabel="y [m]", aspect="equal", adjustable="box")
    alt.set(title="altitude", xlabel="t [s]", ylabel="z [m]")
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
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=90)
    finally:
        plt.close(fig)
