"""Options shared by the ``velobins`` commands, each defined once.

A command builds its parser from these so that ``--dataset``, ``--data``, ``--out``, ``--overwrite``,
``--allow``, ``--params``, ``--threads`` and ``--checkpoint`` mean the same everywhere. The module
imports nothing heavy: ``velobins <command> --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from velobins_common.errors import OptionError
from velobins_data.dataset_kinds import KINDS

Parser = argparse.ArgumentParser | argparse._ArgumentGroup


def add_allow_option(parser: Parser, effect: str) -> None:
    """``--allow CHECK`` (repeatable): override one plausibility check of
    :mod:`velobins_data.validate`; ``effect`` says what the command then does with such flights."""
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CHECK",
        help=f"{effect} (check names: velobins check --help)",
    )


def add_dataset_option(parser: Parser, what: str = "--data", required: bool = True) -> None:
    """``--dataset KIND``: the adapter that reads the flights named by ``what``."""
    parser.add_argument("--dataset", required=required, choices=KINDS, help=f"adapter of {what}")


def add_flights_options(parser: Parser, data_help: str = "a flight file or a directory of flights") -> None:
    """``--dataset`` and ``--data``: the flights a command reads."""
    add_dataset_option(parser)
    parser.add_argument("--data", required=True, type=Path, help=data_help)


def add_overwrite_option(parser: Parser, what: str) -> None:
    """``--overwrite``: replace ``what``, only once the replacement is complete."""
    parser.add_argument("--overwrite", action="store_true", help=f"replace {what} (only once the new one is complete)")


def add_params_option(parser: Parser, effect: str) -> None:
    """``--params FILE`` (repeatable): ROS parameter files whose filter/predictor entries apply."""
    parser.add_argument(
        "--params", action="append", type=Path, default=[], help=f"ROS parameter file (repeatable): {effect}"
    )


def add_threads_option(parser: Parser, default: int = 1) -> None:
    """``--threads N``: torch intra-op threads."""
    parser.add_argument("--threads", type=int, default=default, help="torch threads")


def check_threads(threads: int) -> None:
    """Refuse a thread count below one, naming the option."""
    if threads < 1:
        raise OptionError("--threads", f"must be >= 1, got {threads}")


def add_output_file_option(parser: Parser, flag: str, what: str, **kwargs) -> None:
    """An output *file* option (``check --json``, ``calibrate --out``): ``-`` is stdout; an existing
    file is refused unless ``--overwrite`` (:mod:`velobins_common.output_files`)."""
    parser.add_argument(flag, type=Path, metavar="FILE", help=f"{what} ('-': standard output)", **kwargs)


def given_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The ``dest`` of every option given on the command line ``argv`` (not filled in by a default).

    Parses ``argv`` again with every default suppressed, so an option given with its default value
    counts as given, and defaults set by ``set_defaults`` (a recipe's) do not.
    """
    actions = [a for a in parser._actions if a.dest != argparse.SUPPRESS]
    saved_defaults, saved_parser = [a.default for a in actions], dict(parser._defaults)
    try:
        for action in actions:
            action.default = argparse.SUPPRESS
        parser._defaults.clear()
        namespace, _ = parser.parse_known_args(argv)
    finally:
        for action, default in zip(actions, saved_defaults, strict=True):
            action.default = default
        parser._defaults.update(saved_parser)
    return set(vars(namespace))
