"""The figures of a reproduction report: Fig. nees, Fig. bins, one trajectory figure per shape, and
the qualitative comparison of Table I (one held-out flight per method against ground truth).

Drawn with the plot helpers of :mod:`velobins_eval.report` (Agg backend, atomic PNG writes, the
trajectory axes that follow the ground truth).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from velobins_data.datasets.nanobench import TRAJECTORY_SHAPES, trajectory_shape

from .. import metrics
from ..report import HEADERS, plot_trajectories, pyplot, save_figure
from .plan import HEADLINE, IMU_ONLY, REGRESSION, TABLE1_COLUMNS, sweep_row
from .summary import RowSummary


def nees_figure(nees: dict[str, np.ndarray], path: Path) -> None:
    """Per method: median and inter-quartile band of the per-update NEES (Fig. nees), χ²(3) references."""
    plt = pyplot()
    names = [n for n, v in nees.items() if v.size and np.isfinite(v).all()]
    lo, hi = metrics.NEES_BOUNDS
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(names) + 2) + 3.0, 4.5))
    ax.axhspan(lo, hi, color="green", alpha=0.08, label=f"χ²(3) 95 % bounds [{lo:.3f}, {hi:.3f}]")
    ax.axhline(metrics.NEES_IDEAL_MEDIAN, color="green", lw=1.2, label=f"ideal median {metrics.NEES_IDEAL_MEDIAN:.3f}")
    for i, name in enumerate(names):
        q1, med, q3 = np.percentile(nees[name], [25, 50, 75])
        inside = float(np.mean((nees[name] >= lo) & (nees[name] <= hi)))
        color = "C3" if name == HEADLINE else "C0"
        ax.plot([i, i], [q1, q3], color=color, lw=8, alpha=0.35, solid_capstyle="butt")
        ax.plot(i, med, "o", color=color)
        ax.annotate(f"{inside:.0%}", (i, q3), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set(ylabel="per-update velocity NEES", title="NEES: median (dot), inter-quartile band, share in bounds")
    ax.grid(alpha=0.3, which="both", axis="y")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def bins_figure(rows: dict[str, RowSummary], bins: Iterable[int], path: Path) -> None:
    """Net AVE and NLL against N (log2 axis) with the regression baseline as a line (Fig. bins)."""
    plt = pyplot()
    ns = sorted(n for n in bins if sweep_row(n) in rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("net_ave", "net_nll"), strict=True):
        mean = [rows[sweep_row(n)].mean[key] for n in ns]
        std = [(rows[sweep_row(n)].std or {}).get(key, 0.0) for n in ns]
        ax.errorbar(ns, mean, yerr=np.nan_to_num(std), fmt="o-", color="C3", capsize=3, label="VeloBins G+H^B")
        if REGRESSION in rows:
            r_mean, r_std = rows[REGRESSION].mean[key], (rows[REGRESSION].std or {}).get(key, math.nan)
            ax.axhline(r_mean, color="k", ls="--", lw=1.2, label="Reg")
            if math.isfinite(r_std):
                ax.axhspan(r_mean - r_std, r_mean + r_std, color="k", alpha=0.08)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set(xlabel="bins per axis N", ylabel=HEADERS[key], title=HEADERS[key].split(" [")[0])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def trajectory_figures(records: dict[str, dict[str, Any]], seqs: list, directory: Path) -> list[Path]:
    """One figure per trajectory shape present: its first flight, GT vs G+H^B, Reg, IMU-only.

    Args:
        records: {method row: {flight: FlightRecord}}.
        seqs: the split's flights (ground truth).
    """
    plt = pyplot()
    paths = []
    for shape in TRAJECTORY_SHAPES:
        seq = next((s for s in seqs if trajectory_shape(s.name) == shape), None)
        if seq is None:
            continue
        fig, (top, alt) = plt.subplots(1, 2, figsize=(11, 4.5))
        tracks = ((HEADLINE, "C3"), (REGRESSION, "C0"), (IMU_ONLY, "C7"))
        recs = ((m, records.get(m, {}).get(seq.name), color) for m, color in tracks)
        plot_trajectories(top, alt, seq.t, seq.p, [(m, rec, color) for m, rec, color in recs if rec is not None])
        for ax in (top, alt):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"{shape}: {seq.name}")
        fig.tight_layout()
        path = directory / f"trajectory_{shape}.png"
        save_figure(fig, path, dpi=100)
        paths.append(path)
    return paths


def methods_figure(records: dict[str, dict[str, Any]], seq: Any, path: Path) -> Path | None:
    """One panel per Table I method present (paper's qualitative figure): the fused trajectory of the
    held-out flight ``seq`` (top view), against ground truth, with the method's ATE on it."""
    present = [
        (label, records[row][seq.name]) for label, row in TABLE1_COLUMNS.items() if seq.name in records.get(row, {})
    ]
    if not present:
        return None
    plt = pyplot()
    cols = min(3, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.0 * rows), squeeze=False)
    lo, hi = seq.p.min(axis=0), seq.p.max(axis=0)
    margin = np.maximum(0.5 * (hi - lo), 1.0)
    for ax, (label, rec) in zip(axes.flat, present, strict=False):
        ax.plot(seq.p[:, 0], seq.p[:, 1], "k-", lw=2, label="ground truth")
        ax.plot(rec.p_traj[:, 0], rec.p_traj[:, 1], color="C3" if label == "VeloBins" else "C0", lw=1.2, label=label)
        gt = metrics.interp_columns(rec.t_traj, seq.t, seq.p)
        ate = metrics.ate(rec.p_traj, gt)  # at the full trajectory rate (the table's ATE is at the updates)
        ax.set(xlim=(lo[0] - margin[0], hi[0] + margin[0]), ylim=(lo[1] - margin[1], hi[1] + margin[1]))
        ax.set(title=f"{label}  (ATE {ate:.2f} m, full rate)", xlabel="x [m]", ylabel="y [m]", aspect="equal")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.suptitle(f"EKF-fused trajectories on the held-out flight {seq.name}")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    return path
