"""``velobins calibrate``: options, checks and the run of the fit (the work is in :mod:`velobins_eval.calibrate`,
:mod:`~velobins_eval.calibrate_measure`, :mod:`~velobins_eval.calibrate_fit`, :mod:`~velobins_eval.calibrate_search`,
:mod:`~velobins_eval.calibrate_uncertainty` and :mod:`~velobins_eval.calibrate_report`)."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from velobins_common.errors import OptionError
from velobins_eval.calibrate import (
    IMU_NOISE_SOURCES,
    Inputs,
    fitted_values,
    kept_values,
    load,
    measurements,
    mode_of,
    run_fit,
    spread,
)
from velobins_eval.calibrate_allan import BIAS_FIELDS
from velobins_eval.calibrate_errors import network_lines
from velobins_eval.calibrate_fit import (
    AXES,
    AXIS_FACTORS,
    DEFAULT_FIT,
    DISAGREEMENT,
    FIT_NAMES,
    LIKELIHOODS,
    NETWORK_FITTABLE,
    OBJECTIVES,
    SCALE,
    CalibrationRefused,
    Point,
    check_fit_names,
)
from velobins_eval.calibrate_folds import CHECK_SCORES, DEFAULT_CHECK_SCORE, DEFAULT_FOLDS
from velobins_eval.calibrate_report import fitted_table, overlay_header, overlay_text, predictor_values, stage_lines

from .options import add_allow_option, add_output_file_option


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins calibrate``."""
    from velobins_data.dataset_kinds import KINDS

    p = argparse.ArgumentParser(
        prog="velobins calibrate",
        description="Fit the EKF's IMU noise and the network's variance scale of a vehicle to the network's own "
        "estimates on flights it never saw (--heldout with --checkpoint, or --cross-fit K), or the EKF noise alone "
        "to ground truth plus known noise (neither), and write a parameter overlay YAML. docs/calibrate.md.",
    )
    p.add_argument("--dataset", required=True, choices=KINDS, help="adapter of --data / --heldout")
    p.add_argument("--data", type=Path, help="the vehicle's flights (cross-fit and synthetic modes): file or folder")
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
    net = p.add_argument_group("measurements from the network (the calibration of the real measurement process)")
    net.add_argument(
        "--checkpoint",
        help="network checkpoint or shipped model name (crazyflie: brings its overlay unless --params is given): "
        "held-out mode, or the recipe of the fold models",
    )
    net.add_argument("--heldout", type=Path, help="held-out mode: flights --checkpoint never trained on")
    net.add_argument("--cross-fit", type=int, metavar="K", help="cross-fit mode: K folds of --data by flight")
    net.add_argument("--fold-minutes", type=float, default=2.0, help="cross-fit: training budget per fold model [min]")
    net.add_argument("--variant", help="cross-fit without --checkpoint: the variant to train (default G+H)")
    net.add_argument("--folds-dir", type=Path, help="cross-fit: keep the fold models here (a rerun reuses them)")
    net.add_argument("--threads", type=int, default=1, help="torch threads (network and fold training)")
    syn = p.add_argument_group("synthetic measurements: ground truth + white noise of a known σ (the IMU noise)")
    syn.add_argument("--meas-sigma", type=float, default=0.05, help="std of the synthetic measurement noise [m/s]")
    syn.add_argument("--seed", type=int, default=0, help="seed of the synthetic measurement noise")
    fit = p.add_argument_group("the fit")
    fit.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="posterior",
        help="what to minimise: the fused velocity's NLL against ground truth (posterior, default), the innovations' "
        "NLL, or for the network's fields the fused velocity's error (accuracy: the most accurate s, not the most "
        "consistent) or its CRPS (crps: a proper score between the two); the IMU stage keeps posterior",
    )
    fit.add_argument(
        "--imu-noise",
        choices=IMU_NOISE_SOURCES,
        default="auto",
        help="take the IMU noise densities (and random walks --fit names) from the Allan variance of the IMU against "
        "ground truth exact at the IMU rate: simulated flights, static logs (allan), fit them to ground truth + "
        "N(0, --meas-sigma²) (synthetic), or everything to the network's estimates at once (network); with a "
        "network, s follows on its estimates. auto (default): allan where the flights allow it, else synthetic",
    )
    fit.add_argument(
        "--fit",
        help=f"comma-separated fields to fit, of {', '.join(FIT_NAMES)} (default: the two densities, the initial bias "
        f"sigmas where the Allan variance measures them, {SCALE} when the measurements come from a network, and "
        f"{DISAGREEMENT} too when that network is an ensemble; {AXIS_FACTORS}, three factors x, y, z on the "
        "network's variance, are fitted after them with s and b held)",
    )
    fit.add_argument(
        "--axis-folds",
        type=int,
        default=DEFAULT_FOLDS,
        metavar="K",
        help=f"check fitted {AXIS_FACTORS} in K folds of the flights (fitted on the others, scored on each) and keep "
        f"them only where they lower the held-out objective (default {DEFAULT_FOLDS}; 0: keep the fit unchecked)",
    )
    fit.add_argument(
        "--axis-check-by",
        choices=CHECK_SCORES,
        default=DEFAULT_CHECK_SCORE,
        help="the held-out score that decides the check: the fit's objective (default) or the fused AVE (accuracy); "
        "the report prints both. On NanoBench the fused AVE decided six runs of six right, the objective two "
        "(docs/calibrate.md §2)",
    )
    fit.add_argument("--grid-points", type=int, default=4, help="coarse grid values per density (1: no grid)")
    fit.add_argument("--max-evals", type=int, default=60, help="filter passes per refinement, at most")
    fit.add_argument("--workers", type=int, default=1, help="processes that run the filter over the flights")
    add_allow_option(p, "use flights that fail this plausibility check")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Option errors a user can fix, before any work (:class:`~velobins_common.errors.OptionError`: exit 2)."""
    mode = mode_of(args)
    if args.axis_folds < 0 or args.axis_folds == 1:
        raise OptionError("--axis-folds", f"must be 0 (no check) or >= 2 folds, got {args.axis_folds}")
    if mode == "heldout":
        if args.checkpoint is None:
            raise OptionError("--heldout", "needs --checkpoint (the network whose estimates are calibrated)")
        if args.data is not None:
            raise OptionError("--heldout/--data", "give one (held-out mode calibrates on the --heldout flights)")
    elif args.data is None:
        raise OptionError("--data", "is required (or --checkpoint CKPT --heldout FLIGHTS)")
    if mode == "cross-fit":
        if args.cross_fit < 2:
            raise OptionError("--cross-fit", f"must be >= 2 folds, got {args.cross_fit}")
        if not 0 < args.fold_minutes <= 24 * 60:
            raise OptionError("--fold-minutes", f"must be in (0, 1440], got {args.fold_minutes}")
        if args.checkpoint is not None and args.variant is not None:
            raise OptionError("--variant/--checkpoint", "give one (the fold models use the checkpoint's recipe)")
    elif args.folds_dir is not None or args.variant is not None:
        raise OptionError("--folds-dir/--variant", "apply to --cross-fit only")
    if not (args.meas_sigma > 0 and np.isfinite(args.meas_sigma)):
        raise OptionError("--meas-sigma", f"must be a finite number > 0 m/s, got {args.meas_sigma}")
    if mode == "synthetic" and args.checkpoint is not None:
        raise OptionError("--checkpoint", "needs --heldout (held-out mode) or --cross-fit K (its recipe)")
    if args.max_flights is not None and args.max_flights < 1:
        raise OptionError("--max-flights", f"must be >= 1, got {args.max_flights}")
    for flag, value in (
        ("--grid-points", args.grid_points),
        ("--max-evals", args.max_evals),
        ("--threads", args.threads),
        ("--workers", args.workers),
    ):
        if value < 1:
            raise OptionError(flag, f"must be >= 1, got {value}")
    biases = tuple(BIAS_FIELDS.values())  # by default measured by the Allan stage only (calibrate.imu_stage)
    default = (*DEFAULT_FIT, *biases, SCALE) if mode != "synthetic" else (*DEFAULT_FIT, *biases)
    args.allan_only = () if args.fit is not None else biases
    args.fit_given = args.fit is not None  # an ensemble's checkpoint adds its disagreement to the default
    args.fit = check_fit_names(args.fit.split(",")) if args.fit is not None else default
    network = [n for n in args.fit if n in NETWORK_FITTABLE]
    if args.objective not in LIKELIHOODS and (mode == "synthetic" or args.imu_noise == "network" or not network):
        raise OptionError(
            "--objective",
            f"{args.objective} fits the network's fields only (--heldout / --cross-fit, --fit with variance_scale or "
            "its error model, --imu-noise other than network): the IMU noise is fitted by a likelihood",
        )
    if mode == "synthetic" and network:
        raise OptionError("--fit", f"{', '.join(network)}: each needs network estimates (--heldout / --cross-fit)")
    if any(n in AXES for n in args.fit) and args.imu_noise == "network":
        raise OptionError(
            "--fit", f"{AXIS_FACTORS} are fitted after {SCALE}, with it held: not with --imu-noise network"
        )
    if DISAGREEMENT in args.fit and (SCALE not in args.fit or args.imu_noise == "network"):
        raise OptionError(
            "--fit", f"{DISAGREEMENT} is fitted with {SCALE} (both in --fit), and not with --imu-noise network"
        )


def check_out(path: Path, overwrite: bool):
    """The checked ``--out`` (:func:`velobins_common.output_files.check_output_file`): an existing file
    only with ``--overwrite``, never a folder or a link to a file; ``-`` and special files written directly."""
    from velobins_common.output_files import check_output_file

    return check_output_file(path, overwrite, "--out")


def gather(args: argparse.Namespace) -> Inputs:
    """Every input read and checked before any training or fitting: checkpoint, parameter files, flights.

    A shipped ``--checkpoint`` name (``crazyflie``) brings its overlay as ``--params`` unless ``--params`` is given,
    as everywhere else.
    """
    from velobins_ekf.params import load_filter_config
    from velobins_net.inference import load_predictor_config

    mode = mode_of(args)
    if args.checkpoint is not None:
        from velobins_net.pretrained import resolve_model

        resolved = resolve_model(args.checkpoint)  # a shipped name (crazyflie) or a path
        args.checkpoint = resolved.checkpoint
        if not args.params and resolved.overlay is not None:
            args.params = [resolved.overlay]
            print(f"parameters: {resolved.overlay} (the overlay of the shipped model; --params overrides it)")
    pcfg = load_predictor_config(args.params)
    start = Point(
        load_filter_config(args.params), pcfg.variance_scale, pcfg.disagreement_scale, pcfg.axis_variance_factors
    )
    path = args.heldout if mode == "heldout" else args.data
    all_flights, skipped = load(args, path)
    flights = spread(all_flights, args.max_flights)
    inputs = Inputs(mode, start, flights, len(all_flights), skipped, path)
    inputs.check_network(args)
    return inputs


def default_point() -> Point:
    """The node's own filter config and variance scale (no parameter files): what an overlay need not repeat."""
    from velobins_ekf.params import load_filter_config
    from velobins_net.inference import load_predictor_config

    pcfg = load_predictor_config([])
    return Point(load_filter_config([]), pcfg.variance_scale, pcfg.disagreement_scale, pcfg.axis_variance_factors)


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the filter's worker processes) [s]."""
    import resource

    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + child.ru_utime + child.ru_stime


def main_calibrate(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins calibrate``: options, output and every input are checked before the fit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    check_args(args)
    target = check_out(args.out, args.overwrite)
    # With --out - the overlay alone goes to stdout; the progress lines and tables go to stderr.
    with contextlib.redirect_stdout(sys.stderr) if target.descriptor == 1 else contextlib.nullcontext():
        return _calibrate(args, argv, target)


def _calibrate(args: argparse.Namespace, argv: list[str], target) -> int:
    """The checked command: gather the inputs, measure, fit, report and write the overlay to ``target``."""
    from velobins_common.output_files import write_output_file

    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    inputs = gather(args)
    for line in inputs.notes:
        print(line, file=sys.stderr)
    print(inputs.describe())

    flights = measurements(args, inputs, log=print)
    try:
        fitted, stages = run_fit(args, inputs, flights, log=print)
    except CalibrationRefused as exc:
        raise CalibrationRefused(f"{exc}; {args.out} was not written") from None
    scored = (inputs.start, fitted)
    if inputs.mode == "synthetic":  # known-σ measurements: the network's fields of --params do not apply
        scored = (inputs.start.network_neutral(), fitted.network_neutral())
    table = fitted_table(flights, *scored, args.objective, args.workers, start_label(args))
    net = network_lines(flights, inputs.start.scale, fitted) if inputs.mode != "synthetic" else []
    passes = sum(st.passes for st in stages)
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    timing = f"calibrate took {wall:.0f} s ({cpu:.0f} s CPU, workers included; {passes} filter passes in the fits)"
    report = [*table, *stage_lines(stages), *net]
    print("\n".join([*report, timing]))

    values = fitted_values(stages)
    kept = kept_values(inputs.start, default_point(), values)
    header = [*overlay_header(args, inputs, stages, report), "", "Command: velobins calibrate " + shlex.join(argv)]
    if kept:
        line = "kept from --params (not fitted): " + ", ".join(f"{n} {v:.4g}" for n, v in kept.items())
        print(line)
        header += [line]
    values |= kept
    filter_values = {n: v for n, v in values.items() if n not in (SCALE, DISAGREEMENT, *AXES)}
    write_output_file(target, overlay_text(header, filter_values, *predictor_values(values)))
    print(f"wrote {args.out}")
    return 0


def start_label(args: argparse.Namespace) -> str:
    """The 'before' row's label: the parameter files it came from, or the defaults."""
    return f"before ({', '.join(Path(p).name for p in args.params)})" if args.params else "before (defaults)"


if __name__ == "__main__":
    sys.exit(main_calibrate())
