"""Evaluation reports from flight records: tables, ``metrics.json``, ``report.md``, ``report.html``, plots, estimates.

Used by ``velobins evaluate``, ``velobins score``, the eval node and the demo, so every report has the same
layout (docs/metrics.md):

* ``metrics.json``: ``{method: {"aggregate": {...}, "flights": {flight: {...}}}}`` with the paper's keys
  ``net_ave, net_nll, ave, rte, ate, nees_median, nees_in_bounds`` then the labelled additions
  ``ate_yaw, ate_se3, rot_rms, yaw_final, ave_body, nees_mean, fused_nll`` (units in
  :class:`velobins_eval.metrics.FlightMetrics`); NaN (no such output) is written as ``null``;
* ``metrics.md``: the paper's table (methods as rows, the aggregate, best per column in bold), then
  the table of the additions;
* ``report.md``: both tables, a per-flight table, the filter parameters each row used, the files;
* ``report.html``: the interactive page of :mod:`velobins_eval.report_html`;
* ``plots/<flight>.png`` (150 dpi) and ``.svg``: top view and altitude of every method against ground
  truth, network velocity error with its ±2σ band, and the per-update NEES against the χ²(3) bounds;
* ``estimates/<flight>/<method>/``: TUM trajectories, ``updates.csv`` and the MCAP recording
  (:func:`velobins_eval.estimates.write_flight_estimates`).

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
from .report_tables import (
    EXTRA_TABLE_KEYS,
    HEADERS,
    PER_FLIGHT_TABLE_KEYS,
    Cells,
    best_label,
    extra_table,
    filters_markdown,
    format_value,
    markdown_table,
    per_flight_table,
    render_table,
)
from .scoring import ALL_KEYS, EXTRA_KEYS, KEYS, aggregate, score

__all__ = [
    "ALL_KEYS",
    "EXTRA_KEYS",
    "EXTRA_TABLE_KEYS",
    "HEADERS",
    "KEYS",
    "PER_FLIGHT_TABLE_KEYS",
    "Cells",
    "aggregate",
    "best_label",
    "extra_table",
    "filters_markdown",
    "format_value",
    "json_value",
    "markdown_table",
    "method_label",
    "metrics_entry",
    "per_flight_table",
    "plot_flight",
    "plot_trajectories",
    "pyplot",
    "render_table",
    "save_figure",
    "write_metrics_json",
    "write_report",
]


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


def write_report(
    records: dict[str, dict[str, Any]],
    gts: dict[str, Any],
    out_dir: str | Path,
    config: dict[str, Any] | None = None,
    plots: bool = True,
    filters: Mapping[str, Mapping[str, Any]] | None = None,
    title: str = "VeloBins evaluation",
    estimates: bool = True,
    html_page: bool = True,
    mcap: bool = True,
) -> str:
    """Score ``records[method][flight]`` against ``gts[flight]``; write every file of the module docstring.

    ``filters`` says which filter parameters each row used (report.md, report.html, config.json);
    ``estimates`` writes the per-flight files (``mcap``: with the MCAP recording), ``html_page`` the interactive
    page. Returns ``metrics.md``'s text.
    """
    from .estimates import ESTIMATES_DIR, write_estimates

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scored = {m: {f: score(r, gts[f]) for f, r in recs.items()} for m, recs in records.items()}
    aggregates = {m: aggregate(per) for m, per in scored.items()}
    doc = {m: metrics_entry(aggregates[m], per) for m, per in scored.items()}
    write_metrics_json(out_dir / "metrics.json", doc)
    index = write_estimates(out_dir, records, gts, mcap) if estimates else {}
    if config is not None:
        extra = {"filters": dict(filters)} if filters else {}
        extra |= {"estimates": index} if index else {}
        atomic_write_text(out_dir / "config.json", json.dumps(config | extra, indent=1, default=str))
    flights = list(gts)
    table = markdown_table(aggregates, len(flights))
    atomic_write_text(out_dir / "metrics.md", table + "\n")
    notes = [
        f"{len(flights)} flight(s): {', '.join(flights)}. Fused figures: filter started from ground truth, sampled "
        "at the velocity-update stamps (docs/metrics.md)."
    ]
    sections = [f"# {title}", notes[0], "## Mean over flights", table, "## Per flight", per_flight_table(doc, flights)]
    if filters:
        sections += ["## Filter parameters per row", filters_markdown(filters)]
        notes.append(
            "Filter parameters per row: "
            + "; ".join(
                f"{m}: {', '.join(Path(p).name for p in f.get('params', [])) or 'defaults'}" for m, f in filters.items()
            )
        )
    files = ["`metrics.json`, `metrics.md`, `report.html`" if html_page else "`metrics.json`, `metrics.md`"]
    if plots:
        files.append("`plots/<flight>.png` and `.svg`")
    if index:
        files.append(
            f"`{ESTIMATES_DIR}/<flight>/<method>/`: `estimate.tum`, `ground_truth.tum` (TUM, at the update stamps), "
            "`updates.csv` (per-update record)"
            + (", `recording/` (MCAP: fused odometry, network twist, ground truth, NEES)" if mcap else "")
            + "; `evo_ape tum ground_truth.tum estimate.tum` gives the ATE column"
        )
    sections += ["## Files", "\n".join(f"- {f}" for f in files)]
    atomic_write_text(out_dir / "report.md", "\n\n".join(sections) + "\n")
    if html_page:
        from .report_html import write_html

        write_html(out_dir / "report.html", records, gts, scored, aggregates, title, notes)
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


def save_figure(fig: Any, path: Path, dpi: int, vector: bool = False) -> None:
    """Write ``fig`` as PNG to ``path`` atomically (and an SVG beside it when ``vector``); always close it."""
    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
        if vector:
            with atomic_path(path.with_suffix(".svg")) as tmp:
                fig.savefig(tmp, format="svg")
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
    save_figure(fig, path, dpi=PLOT_DPI, vector=True)


PLOT_DPI = 150
"""Resolution of the report's PNG plots (an SVG is written beside each)."""
