"""Command-line options generated from config dataclasses: defaults and help written once."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from velobins_common.fields import add_config_options, config_values, field_docs


@dataclass(frozen=True)
class GoogleStyle:
    """A config documented in its class docstring.

    Attributes:
        epochs: number of epochs (paper: 100).
        velocity_range: fixed R [m/s]; None = 1.1 × the training
            maximum (continued on a second line).
        fast: use the fast path.
    """

    epochs: int = 100
    velocity_range: float | None = None
    fast: bool = True


@dataclass(frozen=True)
class AttributeStyle:
    gravity: float = 9.8
    """Gravity [m/s²]; 100 % standard."""


def test_field_docs_reads_both_styles() -> None:
    docs = field_docs(GoogleStyle)
    assert docs["epochs"] == "number of epochs (paper: 100)."
    assert docs["velocity_range"].endswith("maximum (continued on a second line).")
    assert field_docs(AttributeStyle) == {"gravity": "Gravity [m/s²]; 100 % standard."}


def test_options_take_default_type_help_and_choices_from_the_dataclass() -> None:
    parser = argparse.ArgumentParser()
    add_config_options(parser, GoogleStyle, ("epochs", "velocity_range", "fast"), choices={"epochs": (1, 100)})
    add_config_options(parser, AttributeStyle, ("gravity",), flags={"gravity": "--g"})
    args = parser.parse_args([])
    assert (args.epochs, args.velocity_range, args.fast, args.gravity) == (100, None, True, 9.8)
    args = parser.parse_args(["--epochs", "1", "--velocity-range", "2.5", "--no-fast", "--g", "9.81"])
    assert config_values(args, ("epochs", "velocity_range", "fast")) == {
        "epochs": 1,
        "velocity_range": 2.5,
        "fast": False,
    }
    assert args.gravity == 9.81
    help_text = parser.format_help()
    assert "number of epochs (paper: 100). (default: 100)" in help_text and "100 % standard" in help_text
    with pytest.raises(SystemExit):
        parser.parse_args(["--epochs", "7"])  # not a choice
