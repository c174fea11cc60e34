"""The report and the overlay of ``velobins calibrate``: the before/after table, the stages' lines, the overlay YAML.

The overlay carries the fitted ``filter.*`` (``velobins_ekf``) and ``predictor.variance_scale``, an ensemble's
``predictor.disagreement_scale`` and ``predictor.axis_variance_factors`` (``velobins_net``) under ``/**/`` keys,
with a comment header that records the data, the method, the before/after table, the uncertainty and the command
(docs/calibrate.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from velobins_common.errors import printable

from .calibrate import ALLAN_LABEL, Inputs, Stage
from .calibrate_ensemble import folded
from .calibrate_fit import (
    AXES,
    AXIS_FACTORS,
    DISAGREEMENT,
    OBJECTIVE_UNITS,
    SCALE,
    UNIT_AXES,
    CalibrationFlight,
    Objective,
    Point,
    consistency,
)

OBJECTIVE_WORDS = {
    "posterior": "posterior NLL per update",
    "innovation": "innovation NLL per update",
    "accuracy": "fused velocity error per update (AVE) for the network's fields, posterior NLL for the IMU's",
    "crps": "fused velocity CRPS per update for the network's fields, posterior NLL for the IMU's",
}
"""How the overlay's header names each ``--objective``."""


def fmt(x: float, digits: int = 4) -> str:
    """A figure for the table: ``digits`` significant digits, ``nan`` as ``—``."""
    return "—" if not np.isfinite(x) else f"{x:.{digits}g}"


def yaml_float(x: float) -> str:
    """``x`` to 4 significant digits as a YAML 1.1 float (a ``.`` in the mantissa: PyYAML reads ``1e-05`` as text)."""
    text = f"{float(x):.4g}"
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + (f"e{exponent}" if exponent else "")


def overlay_text(
    header: list[str],
    filter_values: dict[str, float],
    scale: float | None,
    disagreement: float | None = None,
    axes: Sequence[float] | None = None,
) -> str:
    """The overlay YAML: comment ``header``, the EKF's fitted ``filter.*``, optionally ``predictor.variance_scale``,
    an ensemble's ``predictor.disagreement_scale`` and ``predictor.axis_variance_factors`` (x, y, z).

    Each header entry is one comment line with every control character escaped: a flight file named
    ``x\n/**/velobins_ekf: ...`` must not start a YAML entry that sets a parameter when the overlay is
    loaded (issue 24). The values are floats written by :func:`yaml_float`, never text.
    """
    lines = [f"# {printable(h)}".rstrip() for h in header]
    if filter_values:
        lines += ["/**/velobins_ekf:", "  ros__parameters:", "    filter:"]
        lines += [f"      {name}: {yaml_float(value)}" for name, value in filter_values.items()]
    predictor = {"variance_scale": scale, "disagreement_scale": disagreement}
    predictor = {name: yaml_float(value) for name, value in predictor.items() if value is not None}
    if axes is not None:
        predictor[AXIS_FACTORS] = "[" + ", ".join(yaml_float(k) for k in axes) + "]"
    if predictor:
        lines += ["/**/velobins_net:", "  ros__parameters:", "    predictor:"]
        lines += [f"      {name}: {value}" for name, value in predictor.items()]
    return "\n".join(lines) + "\n"


def predictor_values(values: dict[str, float]) -> tuple[float | None, float | None, tuple[float, ...] | None]:
    """(s, b, the axis factors (x, y, z)) of ``values`` (fitted or kept), each None where absent: what the overlay's
    ``predictor`` section carries. An axis not among ``values`` is 1."""
    axes = tuple(values.get(n, 1.0) for n in AXES) if any(n in values for n in AXES) else None
    return values.get(SCALE), values.get(DISAGREEMENT), axes


def stage_lines(stages: list[Stage]) -> list[str]:
    """Per stage: what it fitted, the widenings of its search and its uncertainty lines."""
    out = []
    for st in stages:
        out.append(f"{st.label}: {st.passes} filter passes; " + ", ".join(f"{n} {v:.4g}" for n, v in st.values.items()))
        out += st.lines
    return out


TABLE_HEADER = (
    "| {} | acc [m/s²/√Hz] | gyro [rad/s/√Hz] | s | objective [{}] | AVE [m/s] | NEES median | NEES in 95 % |"
)


def fitted_table(
    flights: list[CalibrationFlight], start: Point, fitted: Point, kind: str, workers: int, before: str = "before"
) -> list[str]:
    """The before/after table on ``flights``: the objective, fused AVE, NEES median and share in bounds."""
    rows = [TABLE_HEADER.format("filter", OBJECTIVE_UNITS[kind]), "|---|---|---|---|---|---|---|---|"]
    objectives: dict[float, Objective] = {}  # by b/s: one pool of workers for both rows of one network
    try:
        for label, point in ((before, start), ("after (fitted)", fitted)):
            ratio = point.ratio
            data = folded(flights, ratio)
            if ratio not in objectives:
                objectives[ratio] = Objective(data, kind, workers)
            objective = objectives[ratio]
            if point.disagreement > 0:
                label += f"; disagreement weight b {point.disagreement:.4g}"
            if point.axes != UNIT_AXES:
                label += "; axis factors " + ", ".join(f"{k:.3g}" for k in point.axes)
            if point.config.velocity_noise_floor > 0:
                label += f"; velocity noise floor {point.config.velocity_noise_floor:.3g} m/s"
            if point.config.velocity_error_sigma > 0:
                label += f"; velocity error σ_b {point.config.velocity_error_sigma:.3g} m/s, τ "
                label += f"{point.config.velocity_error_tau:.3g} s"
            stats = consistency(data, point.config, point.factors)
            rows.append(
                f"| {label} | {fmt(point.config.acc_noise_density)} | {fmt(point.config.gyro_noise_density)} | "
                f"{fmt(point.scale)} | {objective(point):.4f} | {stats['ave']:.3f} | {stats['nees_median']:.3f} | "
                f"{100 * stats['nees_in_bounds']:.1f} % |"
            )
    finally:
        for objective in objectives.values():
            objective.close()
    return rows


def overlay_header(args: argparse.Namespace, inputs: Inputs, stages: list[Stage], report: list[str]) -> list[str]:
    """The overlay's comment lines: what it is for, the flights, the method, the figures (``report``)."""
    seconds = sum(f.duration for f in inputs.flights)
    source = {
        "heldout": f"the estimates of {args.checkpoint} on flights it never trained on",
        "cross-fit": f"cross-fitting: {args.cross_fit} folds by flight, fold models "
        f"({inputs.recipe.variant if inputs.recipe else ''}) trained {args.fold_minutes:g} min each on the other folds",
        "synthetic": f"ground-truth body velocity + N(0, {args.meas_sigma:g}²) at 20 Hz, seed {args.seed}",
    }[inputs.mode]
    if any(st.label == ALLAN_LABEL for st in stages):
        source += "; the IMU noise from the IMU's error against ground truth (Allan variance)"
    scale = " with the network variance scale" if any(SCALE in st.values for st in stages) else ""
    return [
        f"EKF noise overlay{scale} for the vehicle of {inputs.path} (written by velobins calibrate).",
        "Load after velobins.yaml: drone.launch.py params_file:=<this file>; velobins evaluate --params <this file>.",
        "",
        f"Flights: {len(inputs.flights)} of {inputs.available} ({seconds:.0f} s): "
        + ", ".join(f.name for f in inputs.flights),
        f"Measurements: {source}.",
        f"Objective: {OBJECTIVE_WORDS[args.objective]} (filter started from ground truth), minimised in log10 space "
        f"({', '.join(st.label for st in stages)}). docs/calibrate.md.",
        "",
        *report,
    ]
