"""The dataset kinds and flight options of every command: a module light enough for any parser.

:mod:`velobins_eval.datasets` maps each kind to its adapter; the command line builds its
``--dataset`` choices and ``--allow`` option from here without importing the adapters (numpy,
scipy, h5py, rosbags).
"""

from __future__ import annotations

import argparse

KINDS = ("nanobench", "aiio", "tiiratm", "neurobem", "csv")
"""Source kinds understood by :func:`velobins_eval.datasets.load_sequence` and ``--dataset``."""


def add_allow_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, effect: str) -> None:
    """``--allow CHECK`` (repeatable): override one plausibility check of
    :mod:`velobins_eval.validate`; ``effect`` says what the command then does with such flights."""
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CHECK",
        help=f"{effect} (check names: velobins check --help)",
    )
