"""``velobins calibrate``: fit the EKF noise of a vehicle from its flights and write a parameter overlay.

The filter's IMU noise densities decide how far it trusts the IMU against the network's velocity;
with generic values a noisy airframe (NanoBench's Crazyflie) gives an over-confident filter that
fusion makes *worse* than the network alone. ``config/nanobench.yaml`` was found by a hand grid
search (docs/results/nanobench_cpu.md); this command is that procedure made principled and
repeatable:

1. each training flight gets synthetic velocity measurements: ground-truth body velocity at the
   network's 20 Hz plus seeded N(0, σ²) noise (``--meas-sigma``, default 0.15 m/s as the hand
   search), with σ² handed to the filter, so the measurement model is exact by construction;
2. the filter (started from ground truth) is run for candidate noise values and the Gaussian
   log-likelihood of its velocity innovations is maximised (coarse log₁₀ grid, then Nelder–Mead):
   :mod:`velobins_eval.calibrate_fit`, whose docstring gives the objective and why;
3. the fused AVE, median NEES and NEES share in the χ²(3) 95 % bounds before (defaults or
   ``--params``) and after are printed and written, with the method and the command, as comments
   of the overlay YAML (``/**/velobins_ekf: ros__parameters: filter:``), which ``drone.launch.py
   params_file:=...``, the node and ``velobins evaluate --params`` read alike.

Beyond the paper (which hands the bin variance to the filter unscaled, still the default), with
``--checkpoint CKPT --heldout PATH`` it also fits one scalar s multiplying the network's variance,
by maximum likelihood of the network's velocity errors on *held-out* flights (s = mean e²/σ²), and
writes it as ``velobins_net: predictor: variance_scale`` when the installed predictor has that
parameter. docs/calibrate.md has the method, its measured results and its limits.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from velobins_common.errors import printable
from velobins_data.flight import Flight

from .calibrate_fit import (
    CalibrationFlight,
    consistency,
    variance_scale,
)

TABLE_HEADER = "| {} | acc [m/s²/√Hz] | gyro [rad/s/√Hz] | innov. NLL [nats] | AVE [m/s] | NEES median | NEES in 95 % |"


def spread(items: list, n: int | None) -> list:
    """At most ``n`` of ``items``, evenly spread (first and last kept): a subset covering every kind of flight."""
    if n is None or n >= len(items):
        return list(items)
    index = np.unique(np.round(np.linspace(0, len(items) - 1, n)).astype(int))
    return [items[i] for i in index]


def fmt(x: float, digits: int = 4) -> str:
    """A figure for the table: ``digits`` significant digits, ``nan`` as ``—``."""
    return "—" if not np.isfinite(x) else f"{x:.{digits}g}"


def table_row(label: str, config, nll: float, stats: dict[str, float]) -> str:
    """One row of the before/after table."""
    return (
        f"| {label} | {fmt(config.acc_noise_density)} | {fmt(config.gyro_noise_density)} | {nll:.4f} | "
        f"{stats['ave']:.3f} | {stats['nees_median']:.3f} | {100 * stats['nees_in_bounds']:.1f} % |"
    )


def yaml_float(x: float) -> str:
    """``x`` to 4 significant digits as a YAML 1.1 float (a ``.`` in the mantissa: PyYAML reads ``1e-05`` as text)."""
    text = f"{float(x):.4g}"
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + (f"e{exponent}" if exponent else "")


def overlay_text(header: list[str], filter_values: dict[str, float], scale: float | None) -> str:
    """The overlay YAML: comment ``header``, the EKF's fitted ``filter.*``, optionally ``predictor.variance_scale``.

    Each header entry is one comment line with every control character escaped: a flight file named
    ``x\n/**/velobins_ekf: ...`` must not start a YAML entry that sets a parameter when the overlay is
    loaded (issue 24). The values are floats written by :func:`yaml_float`, never text.
    """
    lines = [f"# {printable(h)}".rstrip() for h in header]
    lines += ["/**/velobins_ekf:", "  ros__parameters:", "    filter:"]
    lines += [f"      {name}: {yaml_float(value)}" for name, value in filter_values.items()]
    if scale is not None:
        lines += ["/**/velobins_net:", "  ros__parameters:", "    predictor:"]
        lines += [f"      variance_scale: {yaml_float(scale)}"]
    return "\n".join(lines) + "\n"


def predictor_has_variance_scale() -> bool:
    """Whether the installed network predictor reads ``predictor.variance_scale`` (written only then)."""
    from velobins_net.inference import PredictorConfig

    return "variance_scale" in {f.name for f in dataclasses.fields(PredictorConfig)}


def network_scale(args: argparse.Namespace, heldout: list[Flight], ekf_config) -> tuple[float, list[str]]:
    """Fit the network variance scale on held-out flights; (s, report lines: NLL and fused figures, s = 1 and s)."""
    import torch

    from velobins_common.progress import progress_bar
    from velobins_net.inference import load_checkpoint, load_predictor_config

    from . import metrics
    from .evaluate import check_fits, predict_flight

    torch.set_num_threads(args.threads)
    model = load_checkpoint(args.checkpoint)
    check_fits(model, args.checkpoint, heldout)
    pcfg = load_predictor_config(args.params)
    if predictor_has_variance_scale():
        pcfg = dataclasses.replace(pcfg, variance_scale=1.0)  # fit s against the raw network variance
    preds = []
    for flight in progress_bar(heldout, desc="network on held-out", unit="flight", enabled=True):
        t, v, var = predict_flight(model, flight, pcfg)
        preds.append((flight, t, v, var))
    err = np.concatenate([v - metrics_gt_body(flight, t) for flight, t, v, _ in preds])
    var = np.concatenate([p[3] for p in preds])
    v_all = np.concatenate([p[2] for p in preds])
    gt_all = v_all - err
    s = variance_scale(err, var)
    nll = [metrics.gaussian_nll(v_all, k * var, gt_all) for k in (1.0, s)]
    lines = [
        f"network variance scale on {len(heldout)} held-out flight(s) ({args.heldout}), {len(err)} estimates:",
        "| network variance | s | net NLL [nats] | AVE [m/s] | NEES median | NEES in 95 % |",
        "|---|---|---|---|---|---|",
    ]
    for label, k, n in (("unscaled (paper)", 1.0, nll[0]), ("scaled", s, nll[1])):
        stats = consistency([CalibrationFlight(flight, t, v, k * vv) for flight, t, v, vv in preds], ekf_config)
        lines.append(
            f"| {label} | {k:.4g} | {n:.3f} | {stats['ave']:.3f} | {stats['nees_median']:.3f} | "
            f"{100 * stats['nees_in_bounds']:.1f} % |"
        )
    return s, lines


def metrics_gt_body(flight: Flight, t: np.ndarray) -> np.ndarray:
    """Ground-truth body velocity of ``seq`` at stamps ``t``."""
    from .scoring import GroundTruth

    return GroundTruth.of(flight).at(t).body_velocity


def load(args: argparse.Namespace, path: Path) -> tuple[list[Flight], list[str]]:
    """Validated flights under ``path`` and the 'skipped' lines of the files that held none."""
    import warnings

    from velobins_data.datasets import load_flights

    with warnings.catch_warnings():  # the skipped files are printed once, as lines, by the caller
        warnings.simplefilter("ignore", UserWarning)
        loaded = load_flights(args.dataset, path, allow=tuple(args.allow))
    return list(loaded.sequences), [f"skipped {i.path}: {i.reason}" for i in loaded.skipped]
