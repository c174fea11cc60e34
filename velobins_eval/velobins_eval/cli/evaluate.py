"""``velobins evaluate``: options, checks and the run (the scoring itself is :mod:`velobins_eval.evaluate`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from velobins_common.outputs import open_run_dir, output_mode
from velobins_eval.evaluate import (
    EVALUATE_LAYOUT,
    evaluate_checkpoint,
    imu_only_flight,
    load_ekf_config,
    write_report_atomically,
)
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
        help="checkpoint file or shipped model name, e.g. crazyflie (repeatable; a shipped model's EKF overlay "
        "is velobins_net/velobins_net/models/NAME.yaml, pass it with --params)",
    )
    add_flights_options(parser)
    parser.add_argument("--out", required=True, type=Path, help="report directory")
    parser.add_argument("--overwrite", action="store_true", help="replace the report already in --out")
    parser.add_argument("--no-imu-only", action="store_true", help="skip the IMU-integration baseline")
    add_threads_option(parser)
    add_params_option(parser, "its velobins_ekf filter and velobins_net predictor entries apply")
    add_allow_option(parser, "score flights that fail this plausibility check; recorded in config.json")
    parser.add_argument(
        "--cache-dir", type=Path, help="keep parsed flights here (npz) and reuse them while the files are unchanged"
    )
    return parser


def main_evaluate(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins evaluate``: every input is checked before the first flight is scored."""
    args = build_parser().parse_args(argv)
    check_threads(args.threads)
    import torch

    from velobins_data.datasets import load_flights
    from velobins_net.checkpoint import read_checkpoint
    from velobins_net.inference import load_predictor_config
    from velobins_net.pretrained import resolve_checkpoint

    args.checkpoint = [resolve_checkpoint(c) for c in args.checkpoint]  # shipped names (crazyflie) or paths
    for ckpt in args.checkpoint:
        read_checkpoint(ckpt)  # a missing or foreign checkpoint fails before any work
    ekf_config = load_ekf_config(args.params)
    predictor_config = load_predictor_config(args.params)  # the node's predictor.* from the same files
    # --overwrite keeps the earlier report until the new one is complete (write_report_atomically
    # replaces it then), so a failed evaluation loses nothing: lock the directory without clearing it.
    mode = "resume" if args.overwrite else output_mode()
    with open_run_dir(args.out, EVALUATE_LAYOUT, mode):
        torch.set_num_threads(args.threads)
        loaded = load_flights(args.dataset, args.data, allow=tuple(args.allow), cache_dir=args.cache_dir)
        for item in loaded.skipped:
            print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
        flights = list(loaded.sequences)
        all_records: dict[str, dict[str, FlightRecord]] = {}
        for ckpt in args.checkpoint:
            label, records = evaluate_checkpoint(ckpt, flights, ekf_config, predictor_config=predictor_config)
            all_records[label] = records
        if not args.no_imu_only:
            first = next(iter(all_records.values()))
            all_records["imu-only"] = {s.name: imu_only_flight(s, first[s.name].t, ekf_config) for s in flights}
        gts = {s.name: GroundTruth.of(s) for s in flights}
        config = {
            "dataset": args.dataset,
            "data": str(args.data),
            "checkpoints": [str(c) for c in args.checkpoint],
            "params": [str(p) for p in args.params],
            "predictor": dataclasses.asdict(predictor_config),
            "allowed_checks": list(args.allow),
            "skipped_flights": [{"path": str(i.path), "reason": i.reason} for i in loaded.skipped],
        }
        table = write_report_atomically(all_records, gts, args.out, config)
    print(table)
    if loaded.skipped:
        print(f"{len(loaded.skipped)} flight(s) skipped (listed above and in config.json)")
    return 0
