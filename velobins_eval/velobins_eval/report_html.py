"""``report.html``: the interactive report of an evaluation, one self-contained page that works offline.

Beside ``report.md`` (:mod:`velobins_eval.report`), from the same records and scores. Built with plotly;
plotly.js is embedded once in the page (no network access needed, no CDN). Per flight:

* the trajectories in 3-D and in top view, every method against ground truth (axes follow the
  ground truth with a margin, so a diverging IMU-only track cannot squash the view);
* the fused velocity per world axis with its ±2σ band (covariance diagonal), and the network's body
  velocity per axis with its ±2σ band, each against ground truth;
* the per-update NEES of the fused velocity over time (log scale) with the χ²(3) 95 % bounds and the
  ideal median;
* the flight's table of every metric.

The page starts with the aggregate tables and the filter parameters each row used. Figures carry
the ``plotly-graph-div`` class plotly gives them; the test renders the page in headless Chromium.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from velobins_common.outputs import atomic_write_text

from . import metrics

MAX_POINTS = 4000
"""Trajectory points per trace at most (evenly thinned; the page stays light on long flights)."""
GT_COLOR = "black"
PALETTE = (
    "rgb(31,119,180)",
    "rgb(255,127,14)",
    "rgb(44,160,44)",
    "rgb(214,39,40)",
    "rgb(148,103,189)",
    "rgb(140,86,75)",
    "rgb(227,119,194)",
    "rgb(127,127,127)",
)
"""Colour of the i-th method in every figure of the page (matplotlib's tab10, as the PNG plots)."""


def _thin(n: int) -> np.ndarray:
    step = max(1, math.ceil(n / MAX_POINTS))
    return np.arange(0, n, step)


def _list(a: np.ndarray) -> list[float]:
    return np.asarray(a, dtype=float).tolist()


def _ranges(p: np.ndarray) -> list[tuple[float, float]]:
    lo, hi = p.min(axis=0), p.max(axis=0)
    margin = np.maximum(0.5 * (hi - lo), 1.0)
    return [(float(lo[i] - margin[i]), float(hi[i] + margin[i])) for i in range(3)]


def trajectory_figures(records: Mapping[str, Any], gt) -> tuple[Any, Any]:
    """(3-D figure, top-view figure) of every method's full-rate trajectory against ground truth."""
    import plotly.graph_objects as go

    g = _thin(gt.t.size)
    f3, top = go.Figure(), go.Figure()
    f3.add_trace(
        go.Scatter3d(
            x=_list(gt.p[g, 0]),
            y=_list(gt.p[g, 1]),
            z=_list(gt.p[g, 2]),
            mode="lines",
            name="ground truth",
            line={"color": GT_COLOR, "width": 5},
        )
    )
    top.add_trace(
        go.Scatter(
            x=_list(gt.p[g, 0]),
            y=_list(gt.p[g, 1]),
            mode="lines",
            name="ground truth",
            line={"color": GT_COLOR, "width": 3},
        )
    )
    for j, (method, rec) in enumerate(records.items()):
        k = _thin(rec.t_traj.size)
        p = rec.p_traj[k]
        line = {"color": PALETTE[j % len(PALETTE)]}
        f3.add_trace(
            go.Scatter3d(x=_list(p[:, 0]), y=_list(p[:, 1]), z=_list(p[:, 2]), mode="lines", name=method, line=line)
        )
        top.add_trace(go.Scatter(x=_list(p[:, 0]), y=_list(p[:, 1]), mode="lines", name=method, line=line))
    (x0, x1), (y0, y1), (z0, z1) = _ranges(gt.p)
    f3.update_layout(
        title="trajectory (3-D) [m]",
        height=560,
        scene={
            "xaxis": {"range": [x0, x1], "title": "x [m]"},
            "yaxis": {"range": [y0, y1], "title": "y [m]"},
            "zaxis": {"range": [z0, z1], "title": "z [m]"},
            "aspectmode": "data",
        },
    )
    top.update_layout(
        title="top view",
        height=520,
        xaxis={"range": [x0, x1], "title": "x [m]"},
        yaxis={"range": [y0, y1], "title": "y [m]", "scaleanchor": "x", "scaleratio": 1},
    )
    return f3, top


def _band(
    fig: Any, row: int, t: np.ndarray, mean: np.ndarray, sigma: np.ndarray, name: str, color: str, first: bool
) -> None:
    import plotly.graph_objects as go

    fill = color.replace("rgb(", "rgba(").replace(")", ",0.18)")
    upper, lower = mean + 2 * sigma, mean - 2 * sigma
    fig.add_trace(
        go.Scatter(
            x=_list(t),
            y=_list(upper),
            mode="lines",
            line={"width": 0},
            showlegend=False,
            legendgroup=name,
            hoverinfo="skip",
        ),
        row=row,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=_list(t),
            y=_list(lower),
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=fill,
            name=f"{name} ±2σ",
            legendgroup=name,
            showlegend=first,
            hoverinfo="skip",
        ),
        row=row,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=_list(t),
            y=_list(mean),
            mode="lines",
            line={"color": color, "width": 1.2},
            name=name,
            legendgroup=name,
            showlegend=first,
        ),
        row=row,
        col=1,
    )


def velocity_figure(records: Mapping[str, Any], gt, frame: str) -> Any | None:
    """Velocity per axis with ±2σ: ``frame`` ``world`` (fused) or ``body`` (network); None when no method has it."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.04)
    t0 = gt.t[0]
    drawn = False
    for j, (method, rec) in enumerate(records.items()):
        if frame == "world":
            mean, cov = rec.v_fused, rec.cov_fused
            var = np.diagonal(cov, axis1=1, axis2=2) if np.all(np.isfinite(cov)) else np.zeros_like(mean)
        else:
            mean, var = rec.v_net, rec.var_net
        if not np.all(np.isfinite(mean)) or not np.all(np.isfinite(var)):
            continue
        sigma = np.sqrt(np.maximum(var, 0.0))
        for axis in range(3):
            _band(
                fig, axis + 1, rec.t - t0, mean[:, axis], sigma[:, axis], method, PALETTE[j % len(PALETTE)], axis == 0
            )
        drawn = True
    if not drawn:
        return None
    ref = next(iter(records.values()))
    at = gt.at(ref.t)
    truth = at.v if frame == "world" else at.body_velocity
    ranges = _ranges(truth)  # around the ground truth: a diverging IMU-only velocity cannot squash the view
    for axis, name in enumerate("xyz"):
        fig.add_trace(
            go.Scatter(
                x=_list(ref.t - t0),
                y=_list(truth[:, axis]),
                mode="lines",
                name="ground truth",
                legendgroup="gt",
                showlegend=axis == 0,
                line={"color": GT_COLOR, "width": 1.5},
            ),
            row=axis + 1,
            col=1,
        )
        fig.update_yaxes(title_text=f"v{name} [m/s]", range=list(ranges[axis]), row=axis + 1, col=1)
    fig.update_xaxes(title_text="t [s]", row=3, col=1)
    what = "fused velocity, world frame" if frame == "world" else "network velocity, body frame"
    fig.update_layout(title=f"{what}, per axis with ±2σ", height=720)
    return fig


def nees_figure(records: Mapping[str, Any], gt) -> Any | None:
    """Per-update NEES of the fused velocity over time with the χ²(3) 95 % bounds; None without covariances."""
    import plotly.graph_objects as go

    from .scoring import nees_series

    fig = go.Figure()
    t0 = gt.t[0]
    drawn = []
    for j, (method, rec) in enumerate(records.items()):
        values = nees_series(rec, gt.at(rec.t))
        if np.all(np.isfinite(values)):
            marker = {"size": 3, "color": PALETTE[j % len(PALETTE)]}
            fig.add_trace(go.Scatter(x=_list(rec.t - t0), y=_list(values), mode="markers", marker=marker, name=method))
            drawn.append(values)
    if not drawn:
        return None
    lo, hi = metrics.NEES_BOUNDS
    every = np.concatenate(drawn)
    positive = every[every > 0]
    bottom = min(float(positive.min()) if positive.size else lo, 0.5 * lo)
    top = max(float(every.max()), 2.0 * hi)
    log_range = [math.log10(bottom) - 0.1, math.log10(top) + 0.1]  # a log axis takes its range in decades
    fig.add_hrect(
        y0=lo,
        y1=hi,
        fillcolor="green",
        opacity=0.1,
        line_width=0,
        annotation_text="χ²(3) 95 %",
        annotation_position="top left",
    )
    fig.add_hline(
        y=metrics.NEES_IDEAL_MEDIAN,
        line={"color": "green", "width": 1, "dash": "dash"},
        annotation_text=f"ideal median {metrics.NEES_IDEAL_MEDIAN:.3f}",
    )
    fig.update_layout(
        title="per-update NEES of the fused velocity",
        height=460,
        xaxis={"title": "t [s]"},
        yaxis={"type": "log", "title": "NEES", "range": log_range},
    )
    return fig


# ---------------------------------------------------------------------------------- page
def table_html(rows: Mapping[str, Mapping[str, float]], keys: tuple[str, ...], first: str = "method") -> str:
    """An HTML table: one row per label, ``keys`` as columns (cells as in the Markdown report, best in bold)."""
    from .report_tables import HEADERS, best_label, format_value

    best = {k: best_label({m: v[k] for m, v in rows.items()}, k) for k in keys}
    head = "".join(f"<th>{html.escape(HEADERS[k])}</th>" for k in keys)
    body = []
    for label, values in rows.items():
        cells = []
        for k in keys:
            text = html.escape(format_value(k, values[k]))
            cells.append(f"<td><b>{text}</b></td>" if best[k] == label else f"<td>{text}</td>")
        body.append(f"<tr><th>{html.escape(label)}</th>{''.join(cells)}</tr>")
    return f"<table><tr><th>{first}</th>{head}</tr>{''.join(body)}</table>"


STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; }
.note { color: #555; font-size: 0.9em; max-width: 70em; }
section.flight { border-top: 2px solid #888; margin-top: 2em; }
"""


def write_html(
    path: Path,
    records: Mapping[str, Mapping[str, Any]],
    gts: Mapping[str, Any],
    scored: Mapping[str, Mapping[str, metrics.FlightMetrics]],
    aggregates: Mapping[str, Mapping[str, float]],
    title: str,
    notes: list[str],
) -> int:
    """Write the page (module docstring) atomically; returns the number of figures on it."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from .report_tables import EXTRA_TABLE_KEYS, KEYS, PER_FLIGHT_TABLE_KEYS

    parts = [
        f"<h1>{html.escape(title)}</h1>",
        *(f'<p class="note">{html.escape(n)}</p>' for n in notes),
        "<h2>Paper metrics (mean over flights)</h2>",
        table_html(aggregates, KEYS),
        "<h2>Aligned ATE, orientation, body-frame velocity, NEES mean (mean over flights)</h2>",
        table_html(aggregates, EXTRA_TABLE_KEYS),
    ]
    figures = 0
    for flight, gt in gts.items():
        recs = {m: r[flight] for m, r in records.items() if flight in r}
        parts.append(f'<section class="flight"><h2>{html.escape(flight)}</h2>')
        rows = {m: scored[m][flight].as_dict() for m in recs}
        parts.append(table_html(rows, PER_FLIGHT_TABLE_KEYS))
        f3, top = trajectory_figures(recs, gt)
        figs = [f3, top, velocity_figure(recs, gt, "world"), velocity_figure(recs, gt, "body"), nees_figure(recs, gt)]
        for fig in figs:
            if fig is None:
                continue
            figures += 1
            parts.append(
                pio.to_html(
                    fig,
                    full_html=False,
                    include_plotlyjs=False,
                    div_id=f"fig{figures}",
                    config={"displaylogo": False, "responsive": True},
                )
            )
        parts.append("</section>")
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>\n'
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
    atomic_write_text(path, page)
    return figures
