"""``velobins calibrate``: options, checks and the run of the noise fit (the work is :mod:`velobins_eval.calibrate`)."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path

import numpy as np

from velobins_common.errors import OptionError, UserError
from velobins_data.flight import Flight
from velobins_eval.calibrate import (
    TABLE_HEADER,
    load,
    network_scale,
    overlay_text,
    predictor_has_variance_scale,
    spread,
    table_row,
)
from velobins_eval.calibrate_fit import (
    DEFAULT_FIT,
    FITTABLE,
    at_search_bound,
    check_fit_names,
    consistency,
    fit_noise,
    synthetic_measurements,
)

from .options import add_allow_option, add_output_file_option


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins calibrate``."""
    from velobins_data.dataset_kinds import KINDS

    p = argparse.ArgumentParser(
        prog="velobins calibrate",
        description="Fit the EKF's IMU noise of a vehicle from its training flights (maximum likelihood of the "
        "velocity innovations, measurements = ground truth + known noise) and write a parameter overlay YAML.",
    )
    p.add_argument("--dataset", required=True, choices=KINDS, help="adapter of --data (and --heldout)")
    p.add_argument("--data", required=True, type=Path, help="training flights: a flight file or a folder")
    add_output_file_option(p, "--out", "overlay YAML to write", required=True)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument(
        "--params",
        action="append",
        type=Path,
        default=[],
        help="ROS parameter file(s): the start ('before') filter and the predictor (default: the overlay of a "
        "shipped --checkpoint, else the defaults)",
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
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="network checkpoint or shipped model name (crazyflie: brings its overlay unless --params is given): "
        "also fit its variance scale on --heldout",
    )
    p.add_argument("--heldout", type=Path, help="held-out flights (never the training ones) for the variance scale")
    p.add_argument("--threads", type=int, default=1, help="torch threads (--checkpoint)")
    add_allow_option(p, "use flights that fail this plausibility check")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Option errors a user can fix, before any work (``OptionError``: exit 2)."""
    if (args.checkpoint is None) != (args.heldout is None):
        raise OptionError("--checkpoint/--heldout", "go together (the variance scale is fitted on held-out flights)")
    if args.max_flights is not None and args.max_flights < 1:
        raise OptionError("--max-flights", f"must be >= 1, got {args.max_flights}")
    if not (args.meas_sigma > 0 and np.isfinite(args.meas_sigma)):
        raise OptionError("--meas-sigma", f"must be a finite number > 0 m/s, got {args.meas_sigma}")
    for flag, value in (
        ("--grid-points", args.grid_points),
        ("--max-evals", args.max_evals),
        ("--threads", args.threads),
    ):
        if value < 1:
            raise OptionError(flag, f"must be >= 1, got {value}")
    args.fit = check_fit_names(args.fit.split(","))


def check_out(path: Path, overwrite: bool):
    """The checked ``--out`` (:func:`velobins_common.output_files.check_output_file`): an existing file
    only with ``--overwrite``, never a folder or a link to a file; ``-`` and special files written directly."""
    from velobins_common.output_files import check_output_file

    return check_output_file(path, overwrite, "--out")


def check_network(args: argparse.Namespace, heldout: list[Flight]):
    """The ``--checkpoint`` model, checked against the held-out flights before the fit (not after it).

    The variance scale is fitted on a velocity network's streaming output (VeloBins, AI-IO); a
    baseline of Table I (TLIO, EqNIO, IMO: displacement; AirIO: attitude input) has none here.
    """
    from velobins_net.inference import load_checkpoint, load_predictor_config
    from velobins_net.pretrained import resolve_checkpoint

    from ..evaluate import check_fits

    args.checkpoint = resolve_checkpoint(args.checkpoint)  # shipped names (crazyflie) as everywhere else
    model = load_checkpoint(args.checkpoint)
    if model.cfg.method != "velobins":
        raise OptionError(
            "--checkpoint",
            f"{args.checkpoint} is a {model.cfg.method} model; the variance scale is fitted for a velocity "
            "network streaming body velocity (VeloBins or AI-IO)",
        )
    check_fits(model, args.checkpoint, heldout)
    window = model.cfg.window_s
    short = [f.name for f in heldout if f.duration <= window]
    if short:
        raise UserError(f"{args.heldout}: flight(s) {', '.join(short)} shorter than one network window ({window:g} s)")
    load_predictor_config(args.params)  # a bad predictor entry of --params fails now, not after the fit


def main_calibrate(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins calibrate``: options, output and inputs are checked before the fit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    check_args(args)
    target = check_out(args.out, args.overwrite)
    # With --out - the overlay alone goes to stdout; the progress lines and tables go to stderr.
    with contextlib.redirect_stdout(sys.stderr) if target.descriptor == 1 else contextlib.nullcontext():
        return _calibrate(args, argv, target)


def _calibrate(args: argparse.Namespace, argv: list[str], target) -> int:
    """The checked command: resolve the model, load, fit, report and write the overlay to ``target``."""
    from velobins_common.output_files import write_output_file
    from velobins_ekf.params import load_filter_config

    if args.checkpoint is not None:
        from velobins_net.checkpoint import read_checkpoint
        from velobins_net.pretrained import resolve_model

        resolved = resolve_model(args.checkpoint)  # a shipped name (crazyflie) or a path
        args.checkpoint = resolved.checkpoint
        read_checkpoint(args.checkpoint)  # a missing or foreign checkpoint fails before any work
        if not args.params and resolved.overlay is not None:
            args.params = [resolved.overlay]  # the shipped model's own filter and predictor, unless --params
            print(f"parameters: {resolved.overlay} (the overlay of the shipped model; --params overrides it)")
    start = load_filter_config(args.params)
    all_seqs, skipped = load(args, args.data)
    seqs = spread(all_seqs, args.max_flights)
    heldout: list[Flight] = []
    if args.heldout is not None:
        heldout, skipped_h = load(args, args.heldout)
        skipped += skipped_h
        train_names = {s.name for s in all_seqs}
        shared = sorted(s.name for s in heldout if s.name in train_names)
        if shared:
            raise UserError(f"{args.heldout}: flight(s) {', '.join(shared)} are also in --data; hold them out")
        check_network(args, heldout)
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
    pinned = at_search_bound(fit)
    if pinned:
        shown = ", ".join(f"{n} {v:.3g} (bound {b:.3g})" for n, (v, b) in pinned.items())
        raise UserError(
            f"{args.data}: the fit ended at a bound of its search: {shown}; the flights do not determine it "
            f"(a frozen or noise-free IMU? too little flight?); {args.out} was not written"
        )
    before, after = consistency(flights, start), consistency(flights, fit.config)
    table = [
        TABLE_HEADER.format("filter"),
        "|---|---|---|---|---|---|---|",
        table_row(
            "before" + (f" ({', '.join(p.name for p in args.params)})" if args.params else " (defaults)"),
            start,
            fit.start_objective,
            before,
        ),
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
    write_output_file(target, overlay_text(header, fitted, scale))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main_calibrate())
