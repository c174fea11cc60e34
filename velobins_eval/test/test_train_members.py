"""``velobins train --members K`` (velobins_eval.cli.train_members): the default recipe's two members in one
command, what a bare ``--resume`` continues, what runs one network instead (torchrun, the baselines), and members
that validate on flights of their own (``--member-folds``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from velobins_common.errors import OptionError
from velobins_eval.cli import main
from velobins_eval.cli.train import parse_train_args
from velobins_eval.cli.train_members import settle_members
from velobins_net.checkpoint import read_checkpoint

DEMO = Path(__file__).resolve().parents[1] / "velobins_eval" / "demo_data" / "nanobench"
BASE = ["--dataset", "nanobench", "--data", str(DEMO), "--val-fraction", "0.5"]


def test_the_recipes_members_give_way_to_one_network_under_torchrun_and_for_the_baselines(
    tmp_path, monkeypatch, capsys
):
    """Where the recipe set the members: torchrun trains one network and says so, a baseline trains one; given
    explicitly, torchrun's is refused; a bare ``--resume`` follows what ``--out`` holds."""

    def settled(*argv: str) -> int:
        args = parse_train_args([*BASE, "--out", str(tmp_path / "run"), *argv])
        settle_members(args)
        return args.members

    assert settled() == 2 and settled("--method", "tlio") == 1 and settled("--members", "3") == 3
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert settled() == 1 and "torchrun trains one network" in capsys.readouterr().out
    with pytest.raises(OptionError, match="not under torchrun"):
        settled("--members", "2")
    monkeypatch.delenv("WORLD_SIZE")
    for i in range(3):
        (tmp_path / "run" / f"member_{i}").mkdir(parents=True)
    assert settled("--resume") == 3 and settled("--resume", "--members", "2") == 2
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "last.pt").write_bytes(b"")
    args = parse_train_args([*BASE, "--out", str(tmp_path / "single"), "--resume"])
    settle_members(args)
    assert args.members == 1


def test_members_train_an_ensemble_in_one_command(tmp_path, capsys):
    """The default recipe's two members (``own-vehicle``: ``--members 2``): two runs in ``--out/member_<i>`` (seeds 0
    and 1, half the budget each, or all the epochs without one), their ensemble as ``--out/best.pt`` which every
    loader takes as one model, and a manifest that lists the members; ``--overwrite`` replaces a single run only
    once the ensemble is written; a bare ``--resume`` continues what ``--out`` holds, an ensemble or one network;
    ``--resume`` is bare for an ensemble; an impossible count is one line, exit 2."""
    from velobins_common.outputs import read_manifest
    from velobins_net.checkpoint import MEMBERS_KEY
    from velobins_net.ensemble import EnsembleNet
    from velobins_net.inference import load_checkpoint

    out = tmp_path / "run"
    tiny = [*BASE, "--bins", "32", "--epochs", "1", "--stride", "50", "--threads", "1", "--no-progress"]
    assert main(["train", *tiny, "--members", "1", "--no-tensorboard", "--out", str(out)]) == 0  # one network first
    capsys.readouterr()
    assert main(["train", *tiny, "--overwrite", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "label floor val, 2 members) ->" in printed and "member 1/2: seed 0" in printed
    assert "member 2/2: seed 1" in printed
    assert f"ensemble of 2 members -> {out / 'best.pt'}" in printed
    assert f"-> {out / 'member_1' / 'best.pt'}" in printed  # the final place, not the staging folder
    ck = read_checkpoint(out / "best.pt")
    assert [m["source"] for m in ck[MEMBERS_KEY]] == [str(out / f"member_{i}" / "best.pt") for i in (0, 1)]
    assert [read_checkpoint(out / f"member_{i}" / "best.pt")["train_config"]["seed"] for i in (0, 1)] == [0, 1]
    data = [read_checkpoint(out / f"member_{i}" / "best.pt")["data"] for i in (0, 1)]
    assert data[0] == data[1]  # the recipe's members share the run's split (--member-folds is an option)
    assert isinstance(load_checkpoint(out / "best.pt"), EnsembleNet)
    assert not (out / "last.pt").exists() and not (out / "history.json").exists()  # the single run is gone
    assert {"member_0", "member_1", "best.pt"} <= set(read_manifest(out)["files"])

    assert main(["train", *tiny, "--epochs", "2", "--resume", "--out", str(out)]) == 0
    capsys.readouterr()
    assert [read_checkpoint(out / f"member_{i}" / "last.pt")["epoch"] for i in (0, 1)] == [1, 1]  # both went on
    single = tmp_path / "single"
    assert main(["train", *tiny, "--members", "1", "--no-tensorboard", "--out", str(single)]) == 0
    assert main(["train", *tiny, "--epochs", "2", "--no-tensorboard", "--resume", "--out", str(single)]) == 0
    assert read_checkpoint(single / "last.pt")["epoch"] == 1 and not (single / "member_0").exists()
    for argv, message in (
        (["--members", "2", "--resume", str(out / "member_0" / "last.pt")], "--resume: with --members, give it bare"),
        (["--members", "0", "--out", str(tmp_path / "other")], "TrainConfig.members: must be in [1, 16], got 0"),
        (["--members", "1", "--resume", "--out", str(out)], "holds an ensemble's members: resume with the --members"),
        (["--members", "2", "--resume", "--out", str(single)], "holds one network's run (last.pt)"),
    ):
        capsys.readouterr()
        argv = argv if "--out" in argv else [*argv, "--out", str(tmp_path / "other")]
        assert main(["train", *tiny, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    capsys.readouterr()
    assert main(["train", *BASE, "--method", "tlio", "--members", "2", "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only VeloBins and regression networks make an ensemble" in err[0], err
    linked, elsewhere = tmp_path / "linked", tmp_path / "elsewhere"  # a member folder that is a link: refused
    linked.mkdir()
    elsewhere.mkdir()
    (linked / "member_0").symlink_to(elsewhere)
    capsys.readouterr()
    assert main(["train", *tiny, "--members", "2", "--resume", "--out", str(linked)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "member_0: is a link or not a folder" in err[0], err
    assert not any(elsewhere.iterdir()) and not (linked / "best.pt").exists()
    assert main(["train", *tiny, "--members", "2", "--out", str(out)]) == 2  # a run is there: never overwritten
    assert "already holds a train run" in capsys.readouterr().err


def test_member_folds_give_each_member_its_own_validation_flights_or_exit_2_in_one_line(tmp_path, capsys):
    """``--member-folds``: member 1 validates on the flight member 0 trains on, and the other way round (the demo's
    two flights); with ``--val`` or ``--val-split tails``, or more members than blocks of flights, it is one line,
    exit 2, before anything is written."""
    out = tmp_path / "run"
    tiny = [*BASE, "--bins", "32", "--epochs", "1", "--stride", "50", "--threads", "1", "--no-progress"]
    assert main(["train", *tiny, "--member-folds", "--no-tensorboard", "--out", str(out)]) == 0
    assert "2 members each validating on flights of its own) ->" in capsys.readouterr().out
    data = [read_checkpoint(out / f"member_{i}" / "best.pt")["data"] for i in (0, 1)]
    assert [[f["name"] for f in d["val"]] for d in data] == [[f["name"] for f in d["train"]] for d in data[::-1]]
    for argv, message in (
        (["--val", str(DEMO)], "--member-folds: needs its validation flights held out of --data, not --val"),
        (["--val-split", "tails"], "not --val-split tails"),
        (["--members", "3"], "--member-folds: 3 members that each validate on 1 flight(s) of their own need at least"),
    ):
        assert main(["train", *tiny, "--member-folds", *argv, "--out", str(tmp_path / "other")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not (tmp_path / "other").exists()
