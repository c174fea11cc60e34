"""``velobins score``: any method's estimate against a flight's ground truth, with the report of ``velobins evaluate``.

A method the project does not implement (a TUM file from TLIO's own code, a VIO run recorded in a bag)
goes into the same table as the project's rows: the same metrics (:mod:`velobins_eval.metrics`, sampled
at the estimate's own stamps), the same ``metrics.json``, ``report.md``, ``report.html``, plots and
per-flight files. The readers are :mod:`velobins_eval.external`; a TUM file holds poses only, so its
velocity, NEES and network columns are empty, while an ``updates.csv`` written by ``velobins evaluate``
gives back its whole row.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from velobins_common.errors import UserError
from velobins_data.dataset_kinds import KINDS
from velobins_eval.external import ESTIMATE_FORMATS, GROUND_TRUTH_FORMATS

from .options import add_allow_option, add_overwrite_option


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins score``."""
    p = argparse.ArgumentParser(
        prog="velobins score",
        description="Score estimates (TUM, CSV, or an odometry topic in a bag) against a flight's ground truth with "
        "the metrics and report of velobins evaluate (docs/metrics.md).",
    )
    p.add_argument(
        "--estimate",
        action="append",
        required=True,
        type=Path,
        help="estimate file: TUM (.tum/.txt), CSV (updates.csv columns) or a rosbag2 folder (repeatable: one row each)",
    )
    p.add_argument("--label", action="append", default=[], help="row name of each --estimate (default: its file name)")
    p.add_argument(
        "--format",
        default="auto",
        choices=("auto", *ESTIMATE_FORMATS),
        help="format of every --estimate (default: "
        "from the name: a folder or .mcap/.db3 is a bag, .csv is CSV, anything else TUM)",
    )
    p.add_argument("--topic", default="/velobins/odometry", help="nav_msgs/Odometry topic of a bag estimate")
    p.add_argument("--gt", required=True, type=Path, help="ground truth: a flight file or bag, a TUM or EuRoC file")
    p.add_argument(
        "--gt-format",
        required=True,
        choices=(*KINDS, *GROUND_TRUTH_FORMATS),
        help="adapter of --gt: a dataset kind (its ground-truth fields; rosbag: a bag velobins convert wrote), tum "
        "(velocity from the positions) or euroc (state_groundtruth_estimate0/data.csv)",
    )
    p.add_argument("--flight", help="flight name in the report (default: the flight's name or the --gt file name)")
    p.add_argument("--out", required=True, type=Path, help="report directory")
    add_overwrite_option(p, "the report already in --out")
    p.add_argument("--no-mcap", action="store_true", help="skip the MCAP recording of each estimate")
    add_allow_option(p, "score against a --gt flight that fails this plausibility check")
    return p


def main_score(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins score``: every input is read and checked before ``--out`` is touched."""
    from velobins_common.outputs import open_run_dir, output_mode
    from velobins_eval.evaluate import EVALUATE_LAYOUT, write_report_atomically
    from velobins_eval.external import clip_to_ground_truth, guess_estimate_format, read_estimate, read_ground_truth

    args = build_parser().parse_args(argv)
    if args.label and len(args.label) != len(args.estimate):
        raise UserError(f"--label given {len(args.label)} time(s) for {len(args.estimate)} --estimate: one each")
    labels = args.label or [_default_label(p) for p in args.estimate]
    if len(set(labels)) != len(labels):
        raise UserError(f"two estimates share a row name ({', '.join(labels)}); name them with --label")
    gt = read_ground_truth(args.gt, args.gt_format, tuple(args.allow))
    flight = args.flight or gt.name
    records, sources = {}, {}
    for path, label in zip(args.estimate, labels, strict=True):
        fmt = guess_estimate_format(path) if args.format == "auto" else args.format
        record, dropped = clip_to_ground_truth(read_estimate(path, fmt, flight, label, args.topic), gt.truth)
        if dropped:
            print(
                f"{label}: {dropped} sample(s) of {path} outside the ground truth's time span, not scored",
                file=sys.stderr,
            )
        records[label] = {flight: record}
        sources[label] = {"path": str(path), "format": fmt, "samples": int(record.t.size), "dropped": dropped}
        if fmt == "bag":
            sources[label]["topic"] = args.topic
    config = {
        "command": "score",
        "ground_truth": {"path": str(args.gt), "format": args.gt_format, "flight": flight},
        "inputs": sources,
        "allowed_checks": list(args.allow),
    }
    # Staged: an earlier report (--overwrite) goes only once the new one is complete (outputs.Run).
    layout = dataclasses.replace(EVALUATE_LAYOUT, command="score")
    with open_run_dir(args.out, layout, output_mode(overwrite=args.overwrite)) as run:
        table = write_report_atomically(
            records, {flight: gt.truth}, run, config, mcap=not args.no_mcap, title=f"VeloBins score: {flight}"
        )
    print(table)
    return 0


def _default_label(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".tum", ".txt", ".csv"):
        name = name.removesuffix(suffix)
    return name or str(path)


if __name__ == "__main__":
    sys.exit(main_score())
