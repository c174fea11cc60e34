"""The ``velobins`` command line: one entry point for the offline side of the suite.

Subcommands (``velobins <command> --help`` for each):

* ``check``     — the dataset doctor: plausibility of every flight of a file or folder, one table row each;
* ``simulate``  — simulated flights (rotorpy) written as plain CSV;
* ``convert``   — a flight (any adapter) to a rosbag2 with the VeloBins topics;
* ``train``     — train a VeloBins variant or the regression baseline;
* ``evaluate``  — network-only and EKF-fused metrics of checkpoints on a directory of flights;
* ``score``     — any method's estimate (TUM, CSV, odometry in a bag) against a flight's ground truth, same report;
* ``export``    — a checkpoint to TorchScript or ONNX, checked against the PyTorch model (parity);
* ``ensemble``  — several trained checkpoints into one ensemble checkpoint (their bins averaged);
* ``demo``      — the README's main job: the shipped models on real held-out flights through the ROS graph
  (``--simulated``: simulate and train first).
* ``reproduce`` — train every ablation model and regenerate the paper's NanoBench tables and figures.

Heavy imports (torch, rotorpy) happen inside the subcommands so ``velobins --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from velobins_common.errors import UserError, one_line

from .convert import add_convert


def _delegate(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand implemented by ``module.function(argv)`` (keeps its own argparse)."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(module, __package__), function)(args.rest) or 0)

    return run


DELEGATED = {
    "check": (".check", "main_check", "check every flight of a file or folder for plausibility (do this first)"),
    "simulate": (".simulate", "main_simulate", "simulate flights with rotorpy and write them as plain CSV"),
    "train": (".train", "main_train", "train a VeloBins variant or the regression baseline"),
    "evaluate": (".evaluate", "main_evaluate", "evaluate checkpoints (network and EKF-fused) on flights"),
    "score": (".score", "main_score", "score any estimate (TUM, CSV, bag odometry) against a flight's ground truth"),
    "export": (".export", "main_export", "export a checkpoint to TorchScript or ONNX, with a parity check"),
    "ensemble": (".ensemble", "main_ensemble", "combine trained checkpoints into one ensemble checkpoint"),
    "demo": (".demo", "main_demo", "the main job: shipped models on real flights through the ROS graph, report"),
    "reproduce": (".reproduce", "main_reproduce", "train and score every NanoBench table/figure row of the paper"),
    "calibrate": (
        ".calibrate",
        "main_calibrate",
        "fit the filter noise and network variance scale of a vehicle -> parameter overlay YAML",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="velobins", description="VeloBins: learned inertial odometry for drones.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_convert(sub)
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

    A user's mistake is a :class:`~velobins_common.errors.UserError`, raised where it is recognised
    (``FlightError``, ``DatasetError``, ``CheckpointError``, ``OutputError``, ``BagError``,
    ``OptionError``, ...) and already naming the file, field or option; ``OSError`` covers missing
    files, permissions and full disks, named by their path. Any other exception (a plain
    ``ValueError`` included) is a bug and keeps its traceback.
    """
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return one_line(f"{where}{exc.strerror or exc}")
    if isinstance(exc, UserError):
        return one_line(exc)
    return None
