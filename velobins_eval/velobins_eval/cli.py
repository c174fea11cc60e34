"""The ``velobins`` command line: one entry point for the offline side of the suite.

Subcommands (``velobins <command> --help`` for each):

* ``check``     — the dataset doctor: plausibility of every flight of a file or folder, one table row each;
* ``simulate``  — simulated flights (rotorpy) written as plain CSV;
* ``convert``   — a flight (any adapter) to a rosbag2 with the VeloBins topics;
* ``train``     — train a VeloBins variant or the regression baseline;
* ``evaluate``  — network-only and EKF-fused metrics of checkpoints on a directory of flights;
* ``export``    — a checkpoint to TorchScript or ONNX, checked against the PyTorch model (parity);
* ``demo``      — the README's main job: the shipped models on real held-out flights through the ROS graph
  (``--simulated``: simulate and train first).
* ``reproduce`` — train every ablation model and regenerate the paper's NanoBench tables and figures.

Heavy imports (torch, rotorpy) happen inside the subcommands so ``velobins --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from .dataset_kinds import KINDS as DATASET_KINDS
from .dataset_kinds import add_allow_option


def _cmd_convert(args: argparse.Namespace) -> int:
    """Convert one flight to a bag: output checked before any work, bag written whole or not at all."""
    import contextlib

    from velobins_common.outputs import OutputError, check_writable

    from .bag import check_output, write_bag
    from .datasets import load_sequence

    output = Path(args.output)
    check_output(output, args.overwrite)
    existing = next(p for p in (output.parent, *output.parent.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise OutputError(output, f"cannot create the bag: {existing} is a regular file, not a folder")
    check_writable(existing)
    seq = load_sequence(args.dataset, args.input, allow=tuple(args.allow))
    created = [p for p in (output.parent, *output.parent.parents) if not p.exists()]
    try:
        info = write_bag(seq, output, storage=args.storage, overwrite=args.overwrite)
    except BaseException:
        for folder in created:  # parents this run made: a failed convert leaves nothing behind
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    print(
        f"{args.output}: {info.messages} messages, {seq.duration:.1f} s of '{seq.name}' "
        f"({len(seq)} IMU samples at {seq.rate_hz:.0f} Hz, {seq.num_rotors} rotors, {seq.rotor_kind})"
        + (f", stamps shifted by +{info.stamp_offset:g} s" if info.stamp_offset else "")
    )
    return 0


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a flight to a rosbag2 (/imu, /rotor_speeds, /ground_truth/odometry)")
    p.add_argument("--dataset", required=True, choices=DATASET_KINDS, help="adapter that reads --input")
    p.add_argument("--input", required=True, type=Path, help="flight file (or bag/dir, per adapter)")
    p.add_argument(
        "--output", required=True, type=Path, help="output bag directory (must not exist unless --overwrite)"
    )
    p.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"), help="rosbag2 storage plugin")
    add_allow_option(p, "convert a flight that fails this plausibility check")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing bag at --output (only once the new one is complete)",
    )
    p.set_defaults(func=_cmd_convert)


def _delegate(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand implemented by ``module.function(argv)`` (keeps its own argparse)."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module, __package__), function)(args.rest) or 0)

    return run


DELEGATED = {
    "check": (".check", "main_check", "check every flight of a file or folder for plausibility (do this first)"),
    "simulate": (".sim.cli", "main_simulate", "simulate flights with rotorpy and write them as plain CSV"),
    "train": (".train_cli", "main_train", "train a VeloBins variant or the regression baseline"),
    "evaluate": (".evaluate", "main_evaluate", "evaluate checkpoints (network and EKF-fused) on flights"),
    "export": (".export_cli", "main_export", "export a checkpoint to TorchScript or ONNX, with a parity check"),
    "demo": (".demo", "main_demo", "the main job: shipped models on real flights through the ROS graph, report"),
    "reproduce": (".reproduce", "main_reproduce", "train and score every NanoBench table/figure row of the paper"),
    "calibrate": (
        ".calibrate",
        "main_calibrate",
        "fit the EKF noise of a vehicle from its flights -> parameter overlay YAML",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="velobins", description="VeloBins: learned inertial odometry for drones.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_convert(sub)
    for name, (module, function, help_text) in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_delegate(module, function))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv and argv[0] in DELEGATED:
        # Delegated subcommands parse their own options (argparse.REMAINDER drops leading '--x').
        args = argparse.Namespace(command=argv[0], rest=argv[1:], func=_delegate(*DELEGATED[argv[0]][:2]))
    else:
        args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"velobins {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        message = user_error_message(exc)
        if message is None:
            raise  # a bug: keep the traceback
        print(f"velobins {args.command}: error: {message}", file=sys.stderr)
        return 2


def user_error_message(exc: BaseException) -> str | None:
    """One line for an error a user can fix (bad input, path, option, disk), None for a bug.

    Every validation error of the suite is a ``ValueError`` that already names the file, field
    and row (``SequenceError``, ``DatasetError``, ``CheckpointError``, ``OutputError``, ...);
    ``OSError`` covers missing files, permissions and full disks, named by their path.
    """
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}".replace("\n", " ")
    if isinstance(exc, ValueError):
        return " ".join(str(exc).split())
    return None


if __name__ == "__main__":
    sys.exit(main())
