"""``velobins evaluate``: options, checks and the run (the scoring itself is :mod:`velobins_eval.evaluate`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from velobins_common.errors import OptionError, printable
from velobins_common.outputs import open_run_dir, output_mode
from velobins_eval.evaluate import (
    EVALUATE_LAYOUT,
    evaluate_checkpoint,
    filter_summary,
    imu_only_flight,
    load_ekf_config,
    model_params,
    write_report_atomically,
)
from velobins_eval.external import GROUND_TRUTH_FORMATS
from velobins_eval.scoring import FlightRecord, GroundTruth

from .options import add_allow_option, add_flights_options, add_params_option, add_threads_option, check_threads


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins evaluate``."""
    parser = argparse.ArgumentParser(
        prog="velobins evaluate", description="Network-only and EKF-fused metrics of checkpoints on flights."
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        required=True,
        type=Path,
        help="checkpoint file or shipped model name, e.g. crazyflie (repeatable); a shipped model brings its EKF "
        "overlay (velobins_net/velobins_net/models/NAME.yaml) unless --params is given",
    )
    add_flights_options(parser)
    parser.add_argument("--out", required=True, type=Path, help="report directory")
    parser.add_argument("--overwrite", action="store_true", help="replace the report already in --out")
    parser.add_argument("--no-imu-only", action="store_true", help="skip the IMU-integration baseline")
    add_threads_option(parser)
    add_params_option(
        parser,
        "its velobins_ekf filter and velobins_net predictor entries apply to every checkpoint, instead of a "
        "shipped model's own overlay",
    )
    add_allow_option(parser, "score flights that fail this plausibility check; recorded in config.json")
    parser.add_argument(
        "--ground-truth",
        type=Path,
        help="score against this ground truth instead of the flights' own: a TUM or EuRoC file (one flight), or a "
        "folder of them named by flight (<flight>.tum, <flight>.csv, <flight>/mav0/state_groundtruth_estimate0/"
        "data.csv); interpolated onto each flight's clock, samples outside its span dropped (as velobins score)",
    )
    parser.add_argument(
        "--ground-truth-format",
        default="auto",
        choices=("auto", *GROUND_TRUTH_FORMATS),
        help="format of --ground-truth (default: from the header or the name: EuRoC's p_RS_R_x header or a .csv is "
        "euroc, anything else tum)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="keep parsed flights here (npz) and reuse them while the files are unchanged"
    )
    return parser


def checkpoint_labels(given: list[Path], variants: list[str], resolved: list[Path]) -> list[str]:
    """One report row per checkpoint: its variant, and the name given for it when variants repeat.

    Two checkpoints of one variant (two seeds, two runs) were one row, the second replacing the
    first; now each is labelled ``G+H^B (run1/best.pt)``. The same file given twice is refused.
    """
    seen: dict[Path, Path] = {}
    for name, path in zip(given, resolved, strict=True):
        key = Path(path).resolve()
        if key in seen:
            raise OptionError("--checkpoint", f"{name} is given twice (also as {seen[key]})")
        seen[key] = name
    labels = [f"{v} ({printable(g)})" if variants.count(v) > 1 else v for v, g in zip(variants, given, strict=True)]
    if len(set(labels)) != len(labels) or "imu-only" in labels:
        raise OptionError("--checkpoint", f"cannot tell the checkpoints apart by name: {', '.join(labels)}")
    return labels


def with_ground_truth(flights: list, truths: dict, given: Path, allow: tuple[str, ...]) -> list:
    """The flights with the ground truth of ``--ground-truth`` on their clocks (samples outside it dropped, said on
    standard error), each checked for plausibility again since its ground truth changed."""
    from velobins_data.validate import check_flight, parse_allow
    from velobins_eval.external import ground_truth_for, on_flight_clock

    out = []
    for flight in flights:
        resampled, dropped = on_flight_clock(flight, ground_truth_for(flight.name, truths, given), given)
        if dropped:
            print(f"{flight.name}: {dropped} sample(s) outside the ground truth's time span, not used", file=sys.stderr)
        check_flight(resampled, parse_allow(allow))
        out.append(resampled)
    return out


def _adapter_options(args: argparse.Namespace, truths: dict | None) -> dict:
    """``load_flights`` options: the cache, or, for a recorded bag with ``--ground-truth``, the ground truth itself
    (the bag then needs no ground-truth topic; not cached, since the flight's span depends on it)."""
    if truths is None or args.dataset != "rosbag":
        return {"cache_dir": args.cache_dir}
    from velobins_eval.external import ground_truth_for

    def source(name: str) -> tuple:
        gt = ground_truth_for(name, truths, args.ground_truth)
        return gt.t, gt.p, gt.q, gt.v

    return {"ground_truth": source}


def _ground_truth_config(args: argparse.Namespace) -> dict | str:
    """What ``config.json`` says about the ground truth: the flights' own, or the file and format given."""
    if args.ground_truth is None:
        return "the flights' own"
    from velobins_eval.external import guess_ground_truth_format

    fmt = args.ground_truth_format
    return {
        "path": str(args.ground_truth),
        "format": guess_ground_truth_format(args.ground_truth) if fmt == "auto" else fmt,
    }


def main_evaluate(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins evaluate``: every input is checked before the first flight is scored."""
    args = build_parser().parse_args(argv)
    check_threads(args.threads)
    import torch

    from velobins_data.datasets import load_flights
    from velobins_eval.external import read_ground_truths
    from velobins_net.checkpoint import read_checkpoint
    from velobins_net.inference import load_predictor_config
    from velobins_net.pretrained import resolve_model

    models = [(str(c), resolve_model(c)) for c in args.checkpoint]  # shipped names (crazyflie) or paths
    args.checkpoint = [m.checkpoint for _, m in models]
    variants = [str(read_checkpoint(c)["variant"]) for c in args.checkpoint]  # a missing or foreign one fails now
    labels = checkpoint_labels([Path(name) for name, _ in models], variants, args.checkpoint)
    configs = []  # per checkpoint: (files, why, filter config, predictor config), every file read before any work
    for _, m in models:
        files, why = model_params(m.overlay, args.params)
        configs.append((files, why, load_ekf_config(files), load_predictor_config(files)))
    truths = read_ground_truths(args.ground_truth, args.ground_truth_format) if args.ground_truth else None
    # --overwrite keeps the earlier report until the new one is complete (the run is staged and
    # committed by write_report_atomically), so a failed evaluation loses nothing.
    with open_run_dir(args.out, EVALUATE_LAYOUT, output_mode(overwrite=args.overwrite)) as run:
        torch.set_num_threads(args.threads)
        loaded = load_flights(args.dataset, args.data, allow=tuple(args.allow), **_adapter_options(args, truths))
        for item in loaded.skipped:
            print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
        flights = list(loaded.sequences)
        if truths is not None:
            flights = with_ground_truth(flights, truths, args.ground_truth, tuple(args.allow))
        all_records: dict[str, dict[str, FlightRecord]] = {}
        filters: dict[str, dict] = {}
        for (_, m), name, (files, why, ekf_config, predictor_config) in zip(models, labels, configs, strict=True):
            label, records = evaluate_checkpoint(
                m.checkpoint, flights, ekf_config, predictor_config=predictor_config, label=name
            )
            all_records[label] = records
            filters[label] = filter_summary(files, why, ekf_config, predictor_config)
        if not args.no_imu_only:
            first_label, first = next(iter(all_records.items()))
            files, why, ekf_config, _ = configs[0]
            all_records["imu-only"] = {s.name: imu_only_flight(s, first[s.name].t, ekf_config) for s in flights}
            filters["imu-only"] = filter_summary(files, f"{why} of {first_label}; no updates", ekf_config)
        gts = {s.name: GroundTruth.of(s) for s in flights}
        config = {
            "dataset": args.dataset,
            "data": str(args.data),
            "checkpoints": [str(c) for c in args.checkpoint],
            "params": [str(p) for p in args.params],
            "predictor": dataclasses.asdict(configs[0][3]),
            "allowed_checks": list(args.allow),
            "ground_truth": _ground_truth_config(args),
            "skipped_flights": [{"path": str(i.path), "reason": i.reason} for i in loaded.skipped],
        }
        table = write_report_atomically(all_records, gts, run, config, filters)
    print(table)
    if loaded.skipped:
        print(f"{len(loaded.skipped)} flight(s) skipped (listed above and in config.json)")
    return 0
