"""Training an ensemble in one run (``TrainConfig.members``): each member is the one-network run of its seed and
budget share, bit for bit; the ensemble checkpoint holds their best weights; a resumed ensemble continues every
member, and one planned otherwise is refused by name."""

from __future__ import annotations

import re

import pytest
import torch
from synthetic import make_flight

from velobins_net.checkpoint import MEMBERS_KEY, CheckpointError, read_checkpoint
from velobins_net.config import MAX_MEMBERS, ModelConfig
from velobins_net.ensemble import EnsembleNet
from velobins_net.inference import load_checkpoint
from velobins_net.train import TrainConfig, run_velocity_range, train
from velobins_net.train_ensemble import (
    fold_splits,
    member_config,
    member_dir,
    members_in,
    train_ensemble,
)

torch.set_num_threads(1)
TINY = ModelConfig(num_bins=32)


def _cfg(**kw) -> TrainConfig:
    base = {"model": TINY, "variant": "G+H^B", "epochs": 1, "stride": 10, "lr": 3e-3, "progress": False}
    return TrainConfig(**(base | {"tensorboard": False} | kw))


@pytest.fixture(scope="module")
def flights():
    return [make_flight(1, duration=6.0)], [make_flight(2, duration=3.0)]


def test_member_config_gives_each_member_its_seed_and_an_equal_share_of_the_budget():
    cfg = _cfg(members=4, seed=7, time_budget=10.0)
    members = [member_config(cfg, i) for i in range(4)]
    assert [m.seed for m in members] == [7, 8, 9, 10]
    assert {m.time_budget for m in members} == {2.5} and {m.members for m in members} == {1}
    assert member_config(_cfg(members=2), 1).time_budget is None  # no budget: every member runs all the epochs
    with pytest.raises(ValueError, match="outside"):
        member_config(cfg, 4)


def test_members_in_counts_the_member_folders_from_0_without_a_gap(tmp_path):
    assert members_in(tmp_path) == 0
    for i in (0, 1, 3):
        member_dir(tmp_path, i).mkdir()
    (tmp_path / "member_x").mkdir()
    (tmp_path / "member_2").write_text("")  # a file, not a member's folder
    assert members_in(tmp_path) == 2


def test_the_number_of_members_is_bounded_and_train_trains_one_network(tmp_path, flights):
    for bad in (0, MAX_MEMBERS + 1):
        with pytest.raises(ValueError, match=r"TrainConfig\.members"):
            _cfg(members=bad)
    with pytest.raises(ValueError, match="train_ensemble"):
        train(_cfg(members=2), *flights, tmp_path / "one")
    with pytest.raises(ValueError, match="members >= 2"):
        train_ensemble(_cfg(), *flights, tmp_path / "ens")
    with pytest.raises(ValueError, match="resume=True"):
        train_ensemble(_cfg(members=2, resume="x.pt"), *flights, tmp_path / "ens")
    with pytest.raises(ValueError, match=r"TrainConfig\.members: only VeloBins and regression networks"):
        _cfg(members=2, variant="tlio")  # refused before any member trains
    assert not (tmp_path / "one").exists() and not (tmp_path / "ens").exists()


def test_members_are_their_seeds_runs_and_the_ensemble_holds_their_best_weights(tmp_path, flights):
    seen = []
    result = train_ensemble(
        _cfg(members=2, seed=3),
        *flights,
        tmp_path / "stage",
        final_dir=tmp_path / "final",
        on_start=lambda i, cfg: seen.append((i, cfg.seed)),
        on_member=lambda i, cfg, res: seen.append((i, cfg.seed, res.best_epoch)),
    )
    assert seen == [(0, 3), (0, 3, 0), (1, 4), (1, 4, 0)]
    alone = train(_cfg(seed=4), *flights, tmp_path / "alone")  # member 1 is the seed-4 run, bit for bit
    member1 = read_checkpoint(member_dir(tmp_path / "stage", 1) / "best.pt")["model_state"]
    for key, value in read_checkpoint(alone.best_path)["model_state"].items():
        torch.testing.assert_close(member1[key], value, rtol=0, atol=0)

    ens = read_checkpoint(result.best_path)
    assert result.best_path == tmp_path / "stage" / "best.pt"
    assert [m["source"] for m in ens[MEMBERS_KEY]] == [
        str(tmp_path / "final" / f"member_{i}" / "best.pt") for i in (0, 1)
    ]
    assert (ens["train_config"]["members"], ens["train_config"]["seed"]) == (2, 3)
    for i, member in enumerate(ens[MEMBERS_KEY]):
        state = read_checkpoint(member_dir(tmp_path / "stage", i) / "best.pt")["model_state"]
        assert all(torch.equal(member["model_state"][k], v) for k, v in state.items())
    w0, w1 = (m["model_state"] for m in ens[MEMBERS_KEY])
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)  # two seeds, two networks
    assert isinstance(load_checkpoint(result.best_path), EnsembleNet)


def test_a_resumed_ensemble_continues_every_member_and_refuses_another_plan(tmp_path, flights):
    out = tmp_path / "ens"
    train_ensemble(_cfg(members=2), *flights, out)
    more = train_ensemble(_cfg(members=2, epochs=2), *flights, out, resume=True)
    assert [[h.epoch for h in r.history] for r in more.members] == [[0, 1], [0, 1]]
    assert read_checkpoint(out / "best.pt")[MEMBERS_KEY][0]["source"] == str(out / "member_0" / "best.pt")
    with pytest.raises(CheckpointError, match=r"member_0/last.pt.*seed is 0, this run's would be 5"):
        train_ensemble(_cfg(members=2, epochs=3, seed=5), *flights, out, resume=True)
    with pytest.raises(CheckpointError, match=r"member_folds is False, this run's would be True"):
        train_ensemble(_cfg(members=2, epochs=3, member_folds=True), *flights, out, resume=True)  # other flights


def test_fold_splits_give_each_member_a_block_of_its_own_and_member_0_the_runs_split():
    assert fold_splits(list("abcdefg"), ["h"], 2) == [(list("abcdefg"), ["h"]), (list("abcdefh"), ["g"])]
    three = fold_splits(list("abcd"), list("ef"), 3)
    assert [val for _, val in three] == [list("ef"), list("cd"), list("ab")]  # every flight validates one member
    assert all(sorted(train + val) == list("abcdef") and not set(train) & set(val) for train, val in three)
    for train_seqs, val_seqs, members, message in (
        (list("abcd"), list("ef"), 4, "validate on 2 flight(s) of their own need at least 8 flights, got 6"),
        (list("ab"), [], 2, "need the run's validation flights, got none"),
        ([], ["a"], 1, "need at least 2 flights, got 1"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            fold_splits(train_seqs, val_seqs, members)


def test_member_folds_train_each_member_on_its_own_split_in_one_velocity_range(tmp_path):
    """Member i is the run of its seed on its fold, bit for bit, in the range measured on all the flights; the
    ensemble's flights are the union of its members', so ``calibrate`` refuses every one of them."""
    fast, slow, third = make_flight(1, duration=6.0), make_flight(2, duration=4.0), make_flight(3, duration=3.0)
    cfg = _cfg(members=2, member_folds=True)
    result = train_ensemble(cfg, [fast, slow], [third], tmp_path / "ens")
    r = run_velocity_range(cfg, [fast, slow, third])
    assert run_velocity_range(_cfg(velocity_range=2.5), [fast]) == 2.5
    assert run_velocity_range(_cfg(velocity_range=0.0), [fast, slow, third]) == r  # 0 is measured, as train() does
    members = [read_checkpoint(member_dir(tmp_path / "ens", i) / "best.pt") for i in (0, 1)]
    assert [m["model_config"]["velocity_range"] for m in members] == [r, r]
    assert [[f["name"] for f in m["data"]["val"]] for m in members] == [[third.name], [slow.name]]
    alone = train(_cfg(seed=1, velocity_range=r), [fast, third], [slow], tmp_path / "alone")
    for key, value in read_checkpoint(alone.best_path)["model_state"].items():
        torch.testing.assert_close(members[1]["model_state"][key], value, rtol=0, atol=0)
    ens = read_checkpoint(result.best_path)
    assert {f["name"] for f in ens["data"]["train"]} == {fast.name, slow.name, third.name}
    assert isinstance(load_checkpoint(result.best_path), EnsembleNet)
    with pytest.raises(ValueError, match="3 members that each validate on 1 flight"):
        train_ensemble(_cfg(members=3, member_folds=True), [fast], [third], tmp_path / "three")
    assert not (tmp_path / "three").exists()
