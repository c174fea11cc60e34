"""``velobins train --recipe`` / ``--time-budget``: recipe defaults, explicit options win, options from TrainConfig."""

from __future__ import annotations

import dataclasses

from velobins_eval.cli.train import TRAIN_FIELDS, parse_train_args
from velobins_net.schedule import RECIPES
from velobins_net.train import TrainConfig


def test_recipe_and_explicit_options_in_the_command_line():
    base = ["--dataset", "csv", "--data", "d", "--out", "o"]
    args = parse_train_args(base)
    assert args.lr == 3e-4 and args.lr_schedule == "constant" and args.time_budget is None
    args = parse_train_args([*base, "--recipe", "small-data", "--lr", "5e-4", "--time-budget", "2"])
    assert args.lr == 5e-4 and args.lr_schedule == "cosine" and args.stride == 4 and args.time_budget == 2.0
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(TRAIN_FIELDS) <= names and set(RECIPES["small-data"]) <= set(TRAIN_FIELDS)
