"""``velobins train`` fine-tuning and training conventions on the command line: ``--init-from`` takes the
source model's variant and architecture as defaults, an explicit other architecture exits 2 in one line,
and a fine-tuned run on real flights writes its checkpoint, history and TensorBoard log."""

from __future__ import annotations

from pathlib import Path

import pytest

from velobins_eval.cli import main
from velobins_eval.cli.train import TRAIN_LAYOUT, parse_train_args
from velobins_net.checkpoint import read_checkpoint

DEMO = Path(__file__).resolve().parents[1] / "velobins_eval" / "demo_data" / "nanobench"
BASE = ["--dataset", "nanobench", "--data", str(DEMO), "--val-fraction", "0.5"]


def test_init_from_takes_the_source_models_options_as_defaults():
    args = parse_train_args([*BASE, "--out", "o", "--init-from", "crazyflie"])
    assert (args.variant, args.num_bins, args.bin_encoding, args.method) == ("G+H^B", 512, "spe", "velobins")
    assert parse_train_args([*BASE, "--out", "o", "--init-from", "crazyflie-reg"]).variant == "reg"
    explicit = parse_train_args([*BASE, "--out", "o", "--init-from", "crazyflie", "--bins", "64", "--variant", "G^B"])
    assert (explicit.num_bins, explicit.variant) == (64, "G^B")
    args = parse_train_args([*BASE, "--out", "o", "--freeze", "encoder,bins", "--freeze", "cov", "--precision", "bf16"])
    assert args.freeze == ("encoder", "bins", "cov") and args.precision == "bf16" and args.init_from is None
    assert "tensorboard" in TRAIN_LAYOUT.patterns  # --overwrite removes the event log with the run


def test_the_default_recipe_is_the_own_vehicle_one_and_paper_reproduces_the_paper():
    """Without ``--recipe`` the KL labels are floored at the validation error and two members trained on the run's
    split (issue 28's study); ``--recipe paper`` is TrainConfig's (the paper's) settings; an explicit option beats
    either."""
    from velobins_net.schedule import DEFAULT_RECIPE, RECIPES
    from velobins_net.train import TrainConfig

    default = parse_train_args([*BASE, "--out", "o"])
    assert DEFAULT_RECIPE == "own-vehicle" and default.recipe == DEFAULT_RECIPE
    assert all(getattr(default, k) == v for k, v in RECIPES[DEFAULT_RECIPE].items())
    assert default.label_floor == "val" and default.members == 2 and not default.member_folds  # items 36, 37
    paper = parse_train_args([*BASE, "--out", "o", "--recipe", "paper"])
    assert paper.label_floor == TrainConfig().label_floor == "none" and paper.kl_scale == TrainConfig().kl_scale
    assert paper.members == TrainConfig().members == 1 and not paper.member_folds and not TrainConfig().member_folds
    assert parse_train_args([*BASE, "--out", "o", "--label-floor", "none"]).label_floor == "none"


def test_another_architecture_or_an_unknown_source_exits_2_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *BASE, "--init-from", "crazyflie", "--bins", "64", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "crazyflie.pt" in err[0] and "num_bins: 512 != 64" in err[0], err
    assert main(["train", *BASE, "--init-from", "nowhere.pt", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere.pt" in err[0] and "shipped" in err[0], err
    assert not (out / "best.pt").exists()


def test_fine_tune_a_shipped_model_on_real_flights(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *BASE, "--init-from", "crazyflie", "--freeze", "encoder", "--epochs", "1", "--stride", "50"]
    argv += ["--precision", "bf16", "--threads", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "initialised from crazyflie (G+H^B)" in printed and "frozen:" in printed
    assert "(recipe own-vehicle, label floor val, 2 members) ->" in printed  # the default recipe says what it changes
    for member in (out / "member_0", out / "member_1"):  # each member fine-tuned from the shipped model
        ck = read_checkpoint(member / "best.pt")
        assert ck["init"]["source"] == "crazyflie" and ck["train_config"]["freeze"] == ("encoder",)
        assert list((member / "tensorboard").glob("events.out.tfevents.*")) and (member / "history.json").is_file()


def test_val_split_tails_and_augmentation_from_the_command_line(tmp_path, capsys):
    """``--val-split tails`` validates on the end of every flight (the demo has 2 flights: both give a tail, so
    2 validation flights instead of the 1 whole flight that ``flights`` holds out); the ``--aug-*`` values land
    in the checkpoint's training config; a negative spread is a usage error (exit 2)."""
    out = tmp_path / "run"
    argv = ["train", *BASE[:4], "--val-split", "tails", "--val-fraction", "0.2", "--variant", "reg", "--epochs", "1"]
    argv += ["--stride", "50", "--aug-acc-bias", "0.1", "--aug-rotor-scale", "0.05", "--threads", "1"]
    assert main([*argv, "--no-progress", "--no-tensorboard", "--out", str(out)]) == 0
    ck = read_checkpoint(out / "best.pt")
    assert len(ck["data"]["val"]) == 2 and len(ck["data"]["train"]) == 2
    assert {d["name"] for d in ck["data"]["val"]} == {d["name"] for d in ck["data"]["train"]}
    assert ck["train_config"]["augment"]["acc_bias"] == 0.1 and ck["train_config"]["augment"]["rotor_scale"] == 0.05
    table = capsys.readouterr().out.splitlines()  # a regression run's epoch table says which loss each epoch had
    head = next(i for i, line in enumerate(table) if line.split()[:2] == ["epoch", "loss"])
    assert table[head].split()[-1] == "phase" and table[head + 1].split()[-1] == "huber"  # 1 epoch: Huber only
    with pytest.raises(SystemExit) as stop:  # an argparse usage error
        main(["train", *BASE, "--aug-gyro-noise", "-1", "--out", str(tmp_path / "bad")])
    assert stop.value.code == 2 and "argument --aug-gyro-noise: must be >= 0" in capsys.readouterr().err
