"""The network-based measurements of ``velobins calibrate`` (calibrate_measure) and the command in its held-out and
cross-fit modes, on short simulated flights and a tiny network (one epoch, 32 bins).

What is checked: every flight's estimates come from a model that never saw it (fold plan, held-out check against
the checkpoint's recorded training flights), the fit writes the filter noise *and* the network variance scale, the
uncertainty is printed, fold models are reused on a rerun and a foreign --folds-dir is refused before any training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from velobins_data.datasets.csv_format import write_csv
from velobins_data.sim.flight import simulate_flight
from velobins_ekf.params import load_filter_config
from velobins_eval.calibrate_measure import (
    FOLD_FILE,
    SELECTION_SHARE,
    assign_folds,
    split_for_selection,
)
from velobins_eval.cli import main as cli_main
from velobins_net.inference import load_predictor_config

TINY = ["--members", "1", "--epochs", "1", "--stride", "25", "--val-stride", "25", "--bins", "32", "--batch-size", "64"]
"""A one-epoch, 32-bin training: enough to produce estimates, seconds on a CPU."""


@pytest.fixture(scope="module")
def sim_flights():
    """Three 15 s simulated nano flights of different families."""
    return [
        simulate_flight("nano", fam, 15.0, seed, index=i)
        for i, (fam, seed) in enumerate((("figure8", 1), ("helix", 2), ("circle", 3)))
    ]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, sim_flights) -> dict[str, Path]:
    """``train`` (flights 0, 1), ``heldout`` (flight 2) and ``all`` (the three) as plain-CSV folders."""
    root = tmp_path_factory.mktemp("calib_measure")
    out = {name: root / name for name in ("train", "heldout", "all")}
    for p in out.values():
        p.mkdir()
    for i, f in enumerate(sim_flights):
        write_csv(f, out["train" if i < 2 else "heldout"] / f"{f.name}.csv")
        write_csv(f, out["all"] / f"{f.name}.csv")
    return out


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, dirs) -> Path:
    """A one-epoch checkpoint trained on the ``train`` flights (it records their names)."""
    run = tmp_path_factory.mktemp("calib_run") / "run"
    args = ["train", "--dataset", "csv", "--data", str(dirs["train"]), "--val", str(dirs["train"]), *TINY]
    assert cli_main([*args, "--no-progress", "--out", str(run)]) == 0
    return run / "best.pt"


FAST = ["--grid-points", "1", "--max-evals", "6"]


def test_assign_folds_balances_duration_and_holds_every_flight_once(sim_flights):
    flights = [f.slice(0, n) for f, n in zip(sim_flights, (1500, 1000, 600), strict=True)]
    folds = assign_folds(flights, 2)
    assert sorted(i for f in folds for i in f) == [0, 1, 2] and all(folds)
    assert folds == [[0], [1, 2]]  # the longest alone; the two shorter ones together
    assert assign_folds(flights, 2) == folds  # deterministic
    with pytest.raises(ValueError, match="at least 4 flights"):
        assign_folds(flights, 4)


def test_split_for_selection_keeps_the_tail_of_every_flight(sim_flights):
    train, val = split_for_selection(sim_flights, window_s=1.0)
    assert [f.name for f in train] == [f.name for f in val] == [f.name for f in sim_flights]
    for whole, head, tail in zip(sim_flights, train, val, strict=True):
        assert len(head) + len(tail) == len(whole) and head.t[-1] < tail.t[0]
        assert len(tail) == pytest.approx(SELECTION_SHARE * len(whole), abs=1)
    with pytest.raises(ValueError, match="too short"):
        split_for_selection([f.slice(0, 150) for f in sim_flights], window_s=1.0)


def test_heldout_mode_fits_filter_and_variance_scale(dirs, tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "overlay.yaml"
    base = ["calibrate", "--dataset", "csv", "--checkpoint", str(tiny_checkpoint), *FAST, "--out", str(out)]
    assert cli_main([*base, "--heldout", str(dirs["train"])]) == 2  # the checkpoint trained on these
    err = capsys.readouterr().err
    assert "was trained on" in err and len(err.strip().splitlines()) == 1 and not out.exists()

    assert cli_main([*base, "--heldout", str(dirs["heldout"])]) == 0
    printed = capsys.readouterr().out
    assert "calibrating on 1 of 1 flight(s)" in printed and "heldout measurements" in printed
    # default: two stages, the IMU noise by Allan variance (simulated flights: exact truth), then s alone on the
    # network's estimates
    assert "IMU noise by Allan variance" in printed and "network variance scale on its estimates" in printed
    assert "uncertainty of the fit" in printed and "variance_scale" in printed and "(robust)" in printed
    assert "network alone on these flights" in printed
    load_filter_config([out])
    scale = load_predictor_config([out]).variance_scale
    assert scale > 0 and scale != 1.0
    assert "/**/velobins_net:" in out.read_text() and "variance_scale:" in out.read_text()

    synthetic = ["--imu-noise", "synthetic", "--overwrite"]
    assert cli_main([*base, "--heldout", str(dirs["heldout"]), *synthetic]) == 0
    printed = capsys.readouterr().out
    assert "IMU noise on ground truth + N(0, 0.05²)" in printed and "network variance scale on its estimates" in printed


def test_heldout_mode_fits_axis_factors_after_the_scale(dirs, tiny_checkpoint, tmp_path, capsys):
    """``--fit variance_scale,axis_variance_factors``: s first, then the three factors with s held, each with its
    uncertainty; the overlay carries s and the factors as the list the predictor reads. One held-out flight: the
    check by folds of flights does not run, and says so."""
    out = tmp_path / "overlay.yaml"
    argv = ["calibrate", "--dataset", "csv", "--checkpoint", str(tiny_checkpoint), "--heldout", str(dirs["heldout"])]
    argv += [
        "--grid-points",
        "1",
        "--max-evals",
        "20",
        "--fit",
        "variance_scale,axis_variance_factors",
        "--out",
        str(out),
    ]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    first, second = printed.index("network variance scale on its estimates"), printed.index("per-axis variance factors")
    assert first < second
    pcfg = load_predictor_config([out])
    assert f"(s {pcfg.variance_scale:.4g}, b 0 held)" in printed
    assert all(f"axis_variance_factors.{a} " in printed for a in "xyz") and "(robust)" in printed
    assert len(pcfg.axis_variance_factors) == 3 and pcfg.axis_variance_factors != (1.0, 1.0, 1.0)
    assert "axis_variance_factors: [" in out.read_text() and "; axis factors " in printed
    assert "per axis (x, y, z): its own errors' best s" in printed
    assert "per axis (x, y, z): these flights' RMS body speed" in printed
    assert "not checked by folds of flights: one flight" in printed  # the check needs two (test_calibrate_folds.py)


def test_cross_fit_mode_trains_folds_reuses_them_and_refuses_a_foreign_folds_dir(
    dirs, tiny_checkpoint, tmp_path, capsys
):
    folds = tmp_path / "folds"
    argv = [
        "calibrate",
        "--dataset",
        "csv",
        "--data",
        str(dirs["all"]),
        "--cross-fit",
        "2",
        "--checkpoint",
        str(tiny_checkpoint),  # only its recipe: one epoch, 32 bins
        "--folds-dir",
        str(folds),
        *FAST,
    ]
    joint = ["--imu-noise", "network", "--fit", "acc_noise_density,variance_scale"]
    assert cli_main([*argv, *joint, "--out", str(tmp_path / "a.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "joint fit on the network's estimates" in printed and "IMU noise on ground truth" not in printed
    assert printed.count("training G+H^B on") == 2
    held = []
    for k in (1, 2):
        record = json.loads((folds / f"fold{k}" / FOLD_FILE).read_text())
        assert record["finished"]
        assert not set(record["fold"]["heldout"]) & set(record["fold"]["train"])  # never saw what it predicts
        held += record["fold"]["heldout"]
    assert sorted(held) == sorted(p.stem for p in dirs["all"].iterdir())  # every flight predicted once
    assert load_predictor_config([tmp_path / "a.yaml"]).variance_scale > 0

    assert cli_main([*argv, "--fit", "variance_scale", "--out", str(tmp_path / "b.yaml")]) == 0  # same folds
    printed = capsys.readouterr().out
    assert printed.count("reusing") == 2 and "training G+H^B" not in printed  # reused, not retrained

    assert cli_main([*argv, "--fold-minutes", "3", "--out", str(tmp_path / "c.yaml")]) == 2  # another budget
    err = capsys.readouterr().err
    assert "fold1" in err and "other flights, recipe or budget" in err and not (tmp_path / "c.yaml").exists()


def test_an_ensembles_default_fit_weighs_its_disagreement(dirs, tmp_path, capsys):
    """A checkpoint of ``velobins train --members 2`` calibrated with the default ``--fit``: the disagreement weight
    b is fitted with s (its profile is printed) and lands in the overlay; ``--fit variance_scale`` still fits s
    alone."""
    run = tmp_path / "ens"
    args = ["train", "--dataset", "csv", "--data", str(dirs["train"]), "--val", str(dirs["train"]), *TINY]
    assert cli_main([*args, "--members", "2", "--no-progress", "--no-tensorboard", "--out", str(run)]) == 0
    out = tmp_path / "overlay.yaml"
    base = ["calibrate", "--dataset", "csv", "--checkpoint", str(run / "best.pt"), "--heldout", str(dirs["heldout"])]
    capsys.readouterr()
    assert cli_main([*base, *FAST, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "ensemble variance scale and disagreement weight" in printed and "profile of the objective over b/s" in printed
    )
    assert "disagreement_scale:" in out.read_text()  # this one-epoch pair gets b = 0: its disagreement is no guide
    assert load_predictor_config([out]).disagreement_scale >= 0
    alone = tmp_path / "alone.yaml"
    assert cli_main([*base, *FAST, "--fit", "variance_scale", "--out", str(alone)]) == 0
    assert "disagreement_scale" not in alone.read_text()
