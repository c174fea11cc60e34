"""``velobins convert``: one flight (any adapter) to a rosbag2 with the VeloBins topics."""

from __future__ import annotations

import argparse
from pathlib import Path

from .options import add_allow_option, add_dataset_option, add_overwrite_option


def run_convert(args: argparse.Namespace) -> int:
    """Convert one flight to a bag: output checked before any work, bag written whole or not at all."""
    import contextlib

    from velobins_common.outputs import OutputError, check_writable
    from velobins_data.bag import check_output, write_bag
    from velobins_data.datasets import load_flight

    output = Path(args.output)
    check_output(output, args.overwrite)
    existing = next(p for p in (output.parent, *output.parent.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise OutputError(output, f"cannot create the bag: {existing} is a regular file, not a folder")
    check_writable(existing)
    flight = load_flight(args.dataset, args.input, allow=tuple(args.allow))
    created = [p for p in (output.parent, *output.parent.parents) if not p.exists()]
    try:
        info = write_bag(flight, output, storage=args.storage, overwrite=args.overwrite)
    except BaseException:
        for folder in created:  # parents this run made: a failed convert leaves nothing behind
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    print(
        f"{args.output}: {info.messages} messages, {flight.duration:.1f} s of '{flight.name}' "
        f"({len(flight)} IMU samples at {flight.rate_hz:.0f} Hz, {flight.num_rotors} rotors, {flight.rotor_kind})"
        + (f", stamps shifted by +{info.stamp_offset:g} s" if info.stamp_offset else "")
    )
    return 0


def add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a flight to a rosbag2 (/imu, /rotor_speeds, /ground_truth/odometry)")
    add_dataset_option(p, "--input")
    p.add_argument("--input", required=True, type=Path, help="flight file (or bag/dir, per adapter)")
    p.add_argument(
        "--output", required=True, type=Path, help="output bag directory (must not exist unless --overwrite)"
    )
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"), help="rosbag2 storage plugin")
    add_allow_option(p, "convert a flight that fails this plausibility check")
    add_overwrite_option(p, "an existing bag at --output")
    p.set_defaults(func=run_convert)
