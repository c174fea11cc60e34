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
import shlex
import sys
from pathlib import Path

import numpy as np

from .calibrate_fit import (
    DEFAULT_FIT,
    FITTABLE,
    CalibrationFlight,
    check_fit_names,
    consistency,
    fit_noise,
    synthetic_measurements,
    variance_scale,
)
from .sequence import Flight

TABLE_HEADER = "| {} | acc [m/s²/√Hz] | gyro [rad/s/√Hz] | innov. NLL [nats] | AVE [m/s] | NEES median | NEES in 95 % |"


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins calibrate``."""
    from .dataset_kinds import KINDS, add_allow_option

    p = argparse.ArgumentParser(
        prog="velobins calibrate",
        description="Fit the EKF's IMU noise of a vehicle from its training flights (maximum likelihood of the "
        "velocity innovations, measurements = ground truth + known noise) and write a parameter overlay YAML.",
    )
    p.add_argument("--dataset", required=True, choices=KINDS, help="adapter of --data (and --heldout)")
    p.add_argument("--data", required=True, type=Path, help="training flights: a flight file or a folder")
    p.add_argument("--out", required=True, type=Path, help="overlay YAML to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--params", action="append", type=Path, default=[], help="ROS parameter file(s): the start ('before') filter"
    )
    p.add_argument("--max-flights", type=int, help="use at most N flights, evenly spread over the sorted list")
    p.add_argument("--meas-sigma", type=float, default=0.15, help="std of the synthetic measurement noise [m/s]")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic measurement noise")
    p.add_argument(
        "--fit",
        default=",".join(DEFAULT_FIT),
        help=f"comma-separated filter fields to fit, of {', '.join(FITTABLE)} (default: the two densities)",
    )
    p.add_argument("--grid-points", type=int, default=6, help="coarse grid values per density (1: no grid)")
    p.add_argument("--max-evals", type=int, default=60, help="filter evaluations of the refinement, at most")
    p.add_argument("--checkpoint", type=Path, help="network checkpoint: also fit its variance scale on --heldout")
    p.add_argument("--heldout", type=Path, help="held-out flights (never the training ones) for the variance scale")
    p.add_argument("--threads", type=int, default=1, help="torch threads (--checkpoint)")
    add_allow_option(p, "use flights that fail this plausibility check")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Option errors a user can fix, before any work (``ValueError``: exit 2)."""
    if (args.checkpoint is None) != (args.heldout is None):
        raise ValueError("--checkpoint and --heldout go together (the variance scale is fitted on held-out flights)")
    if args.max_flights is not None and args.max_flights < 1:
        raise ValueError(f"--max-flights must be >= 1, got {args.max_flights}")
    if not args.meas_sigma > 0:
        raise ValueError(f"--meas-sigma must be > 0 m/s, got {args.meas_sigma}")
    if args.grid_points < 1 or args.max_evals < 1 or args.threads < 1:
        raise ValueError("--grid-points, --max-evals and --threads must be >= 1")
    args.fit = check_fit_names(args.fit.split(","))


def check_out(path: Path, overwrite: bool) -> None:
    """Refuse an existing ``--out`` without ``--overwrite`` (never a folder) and an unwritable location."""
    from velobins_common.outputs import OutputError, check_writable

    if path.is_dir():
        raise OutputError(path, "is a folder; --out names the overlay YAML file")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise OutputError(path, "already exists; pass --overwrite to replace it")
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not existing.is_dir():
        raise OutputError(path, f"cannot create it: {existing} is a file, not a folder")
    check_writable(existing, reserve_bytes=4096)


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
    """The overlay YAML: comment ``header``, the EKF's fitted ``filter.*``, optionally ``predictor.variance_scale``."""
    lines = [f"# {h}".rstrip() for h in header]
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
    for seq in progress_bar(heldout, desc="network on held-out", unit="flight", enabled=True):
        t, v, var = predict_flight(model, seq, pcfg)
        preds.append((seq, t, v, var))
    err = np.concatenate([v - metrics_gt_body(seq, t) for seq, t, v, _ in preds])
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
        stats = consistency([CalibrationFlight(seq, t, v, k * vv) for seq, t, v, vv in preds], ekf_config)
        lines.append(
            f"| {label} | {k:.4g} | {n:.3f} | {stats['ave']:.3f} | {stats['nees_median']:.3f} | "
            f"{100 * stats['nees_in_bounds']:.1f} % |"
        )
    return s, lines


def metrics_gt_body(seq: Flight, t: np.ndarray) -> np.ndarray:
    """Ground-truth body velocity of ``seq`` at stamps ``t``."""
    from .scoring import GroundTruth

    return GroundTruth.of(seq).at(t).body_velocity


def load(args: argparse.Namespace, path: Path) -> tuple[list[Flight], list[str]]:
    """Validated flights under ``path`` and the 'skipped' lines of the files that held none."""
    import warnings

    from .datasets import load_flights

    with warnings.catch_warnings():  # the skipped files are printed once, as lines, by the caller
        warnings.simplefilter("ignore", UserWarning)
        loaded = load_flights(args.dataset, path, allow=tuple(args.allow))
    return list(loaded.sequences), [f"skipped {i.path}: {i.reason}" for i in loaded.skipped]


def main_calibrate(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins calibrate``: options, output and inputs are checked before the fit."""
    from velobins_common.outputs import atomic_write_text
    from velobins_ekf.params import load_filter_config

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    check_args(args)
    check_out(args.out, args.overwrite)
    start = load_filter_config(args.params)
    if args.checkpoint is not None:
        from velobins_net.checkpoint import read_checkpoint

        read_checkpoint(args.checkpoint)  # a missing or foreign checkpoint fails before any work
    all_seqs, skipped = load(args, args.data)
    seqs = spread(all_seqs, args.max_flights)
    heldout: list[Flight] = []
    if args.heldout is not None:
        heldout, skipped_h = load(args, args.heldout)
        skipped += skipped_h
        train_names = {s.name for s in all_seqs}
        shared = sorted(s.name for s in heldout if s.name in train_names)
        if shared:
            raise ValueError(f"{args.heldout}: flight(s) {', '.join(shared)} are also in --data; hold them out")
    for line in skipped:
        print(line, file=sys.stderr)
    seconds = sum(s.duration for s in seqs)
    print(
        f"calibrating on {len(seqs)} of {len(all_seqs)} flight(s) ({seconds:.0f} s): {', '.join(s.name for s in seqs)}"
    )

    streams = np.random.SeedSequence(args.seed).spawn(len(seqs))
    flights = [
        synthetic_measurements(s, args.meas_sigma, np.random.default_rng(ss))
        for s, ss in zip(seqs, streams, strict=True)
    ]
    fit = fit_noise(flights, start, args.fit, args.grid_points, args.max_evals, progress=True, log=print)
    before, after = consistency(flights, start), consistency(flights, fit.config)
    table = [
        TABLE_HEADER.format("filter"),
        "|---|---|---|---|---|---|---|",
        table_row("before" + (" (--params)" if args.params else " (defaults)"), start, fit.start_objective, before),
        table_row("after (fitted)", fit.config, fit.objective, after),
    ]
    fitted = {n: getattr(fit.config, n) for n in fit.names}
    notes = [f"fitted: {', '.join(f'{n} {v:.4g}' for n, v in fitted.items())} ({fit.evaluations} filter runs)"]
    if fit.at_grid_edge:
        notes.append(f"note: best grid value of {', '.join(fit.at_grid_edge)} was at the grid's edge")
    print("\n".join(table + notes))

    scale = None
    net_lines: list[str] = []
    if args.checkpoint is not None:
        s, net_lines = network_scale(args, heldout, fit.config)
        print("\n".join(net_lines))
        if predictor_has_variance_scale():
            scale = s
        else:
            print("variance_scale not written: the installed velobins_net predictor has no 'variance_scale' parameter")

    header = [
        f"EKF noise overlay for the vehicle of {args.data} (written by velobins calibrate).",
        "Load after velobins.yaml: drone.launch.py params_file:=<this file>; velobins evaluate --params <this file>.",
        "",
        f"Flights: {len(seqs)} of {len(all_seqs)} ({seconds:.0f} s): {', '.join(s.name for s in seqs)}",
        "Method: maximum likelihood of the EKF's velocity innovations (filter started from ground truth;",
        f"measurements = ground-truth body velocity + N(0, {args.meas_sigma:g}²) noise at 20 Hz, seed {args.seed});",
        f"coarse log10 grid then Nelder-Mead over {', '.join(fit.names)}. docs/calibrate.md.",
        f"Objective (mean innovation NLL per update): {fit.start_objective:.4f} -> {fit.objective:.4f} nats.",
        "",
        *table,
        *(["", *net_lines] if net_lines else []),
        "",
        "Command: velobins calibrate " + shlex.join(argv),
    ]
    if args.out.parent != Path(""):
        args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, overlay_text(header, fitted, scale))
    print(f"wrote {args.out}")
    return 0
