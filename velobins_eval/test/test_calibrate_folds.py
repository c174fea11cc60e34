"""The check by folds of flights of ``calibrate``'s per-axis factors (calibrate_folds), through the stage that runs
it (``calibrate.axis_stage``), on conftest's two short simulated flights with measurement noise misstated per axis:
kept where every flight shares the misstatement, set back to the start's where the flights disagree."""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from velobins_data.sim.presets import get_preset
from velobins_ekf.config import EkfConfig
from velobins_eval.calibrate import axis_stage
from velobins_eval.calibrate_fit import AXES, Point
from velobins_eval.calibrate_folds import Fold, FoldCheck, fold_indices


def flights_of(durations: dict[str, float]) -> list[SimpleNamespace]:
    """Stand-ins with what the fold rule reads of a flight: its name and duration."""
    return [SimpleNamespace(name=n, duration=d) for n, d in durations.items()]


def test_folds_balance_duration_and_hold_out_every_flight_once():
    flights = flights_of({"c": 30.0, "a": 10.0, "e": 25.0, "b": 20.0, "d": 15.0})
    folds = fold_indices(flights, 2)
    assert sorted(i for f in folds for i in f) == list(range(5))
    # longest first into the lightest fold: c | e, b | d, then a to the lighter (c+d 45 against e+b 45: fold 0)
    assert [[flights[i].name for i in f] for f in folds] == [["c", "a", "d"], ["e", "b"]]
    assert [sum(flights[i].duration for i in f) for f in folds] == [55.0, 45.0]
    assert fold_indices(flights, 5) == [[0], [2], [3], [4], [1]]  # one each, longest first
    with pytest.raises(ValueError):
        fold_indices(flights, 6)


def test_flights_of_equal_duration_fall_round_robin_in_name_order():
    flights = flights_of({n: 60.0 for n in ("f", "b", "e", "a", "d", "c")})
    folds = fold_indices(flights, 3)
    assert [[flights[i].name for i in f] for f in folds] == [["a", "d"], ["b", "e"], ["f", "c"]]


def test_the_report_counts_the_folds_that_gain_and_says_when_they_disagree():
    def check(*pairs: tuple[float, float]) -> FoldCheck:
        folds = [Fold((f"f{i}",), (1.0, 1.0, 1.0), a, b, 100) for i, (a, b) in enumerate(pairs)]
        return FoldCheck(folds, (1.0, 1.0, 1.0), passes=10)

    split = check((-150.0, -160.0), (-200.0, -180.0), (-100.0, -120.0))  # two gain, one loses more: sum −450 → −460
    assert split.carries and split.gaining == 2 and split.split
    text = "\n".join(split.lines())
    assert "-1.5000 -> -1.5333 nats/update (2 of 3 folds gain): they carry over" in text
    assert "the folds disagree, so the verdict is weak" in text
    agree = check((-150.0, -140.0), (-200.0, -190.0))
    assert not agree.carries and agree.gaining == 0 and not agree.split
    assert "(0 of 2 folds gain): they do not carry over" in "\n".join(agree.lines())
    assert "disagree" not in "\n".join(agree.lines())


def test_a_verdict_the_held_out_fused_ave_contradicts_is_reported_as_weak():
    """The fused AVE of the same held-out folds is printed beside the objective; where it falls while the objective
    says "does not carry over" (or rises while it says "carries") the verdict is called weak, and it stays the
    objective's."""

    def check(ave_start: float | None, ave_fit: float | None) -> FoldCheck:
        folds = [Fold(("f0",), (1.0, 1.0, 1.0), -150.0, -140.0, 100, ave_start, ave_fit)]  # the objective rises
        return FoldCheck(folds, (1.0, 1.0, 1.0), passes=10)

    contradicted = check(30.0, 25.0)  # fused AVE 0.30 -> 0.25 m/s: the factors would have gained
    text = "\n".join(contradicted.lines())
    assert not contradicted.carries and contradicted.scores_disagree and not contradicted.split
    assert contradicted.ave == pytest.approx((0.30, 0.25))
    assert "f0: factors 1, 1, 1; -1.5000 -> -1.4000 nats/update; fused AVE 0.3000 -> 0.2500 m/s" in text
    assert "(0 of 1 folds gain), fused AVE 0.3000 -> 0.2500 m/s: they do not carry over" in text
    assert "the held-out fused AVE says the other, so the verdict is weak" in text
    agreeing = check(30.0, 35.0)
    assert not agreeing.scores_disagree and "weak" not in "\n".join(agreeing.lines())
    unscored = check(None, None)  # the objective is the fused AVE itself: one score
    assert unscored.ave is None and not unscored.scores_disagree
    assert "fused AVE" not in "\n".join(unscored.lines())


def test_the_fused_ave_decides_with_axis_check_by_accuracy():
    """``by`` accuracy: the held-out fused AVE decides, counts the folds that gain, and the objective's contrary
    verdict is what makes it weak; without the folds' AVE (the objective is the AVE) the objective decides."""
    folds = [
        Fold(("f0",), (1.0, 1.0, 1.0), -150.0, -140.0, 100, 30.0, 25.0),  # the objective rises, the AVE falls
        Fold(("f1",), (1.0, 1.0, 1.0), -200.0, -190.0, 100, 20.0, 21.0),  # both rise
    ]
    by_ave = FoldCheck(folds, (1.0, 1.0, 1.0), passes=10, by="accuracy")
    assert by_ave.carries and by_ave.gaining == 1 and by_ave.split and by_ave.scores_disagree
    text = "\n".join(by_ave.lines())
    assert "-1.7500 -> -1.6500 nats/update, fused AVE 0.2500 -> 0.2300 m/s (1 of 2 folds gain): " in text
    assert "gain): by the held-out fused AVE (--axis-check-by accuracy), they carry over" in text
    assert "the folds disagree and the held-out objective says the other, so the verdict is weak" in text
    by_objective = FoldCheck(folds, (1.0, 1.0, 1.0), passes=10)
    assert not by_objective.carries and by_objective.gaining == 0 and not by_objective.split
    assert "the held-out fused AVE says the other" in "\n".join(by_objective.lines())
    one_score = FoldCheck([Fold(("f0",), (1.0, 1.0, 1.0), -150.0, -140.0, 100)], (1.0, 1.0, 1.0), 10, by="accuracy")
    assert not one_score.by_ave and not one_score.carries
    with pytest.raises(ValueError):
        FoldCheck(folds, (1.0, 1.0, 1.0), passes=10, by="nees")


def test_the_stage_keeps_what_the_fused_ave_keeps(calibration_flights, filter_point):
    """The flights of the test below, checked by the fused AVE: the verdict follows the held-out fused AVE."""
    flights = skewed(calibration_flights, [np.array([4.0, 1.0, 4.0]), np.ones(3)])
    stage = axis_stage(flights, filter_point, AXES, stage_args(2, "accuracy"), lambda _: None)
    held = next(line for line in stage.lines if line.startswith("  held out, "))
    before, after = (float(x) for x in held.split("fused AVE ")[1].split(" m/s")[0].split(" -> "))
    assert "by the held-out fused AVE (--axis-check-by accuracy)" in held
    kept_fit = "they carry over" in held
    assert kept_fit == (after < before), held
    assert (stage.point.axes == (1.0, 1.0, 1.0)) != kept_fit


@pytest.fixture(scope="module")
def filter_point() -> Point:
    """The simulator's IMU noise, s 1, factors 1: the stage's start."""
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    return Point(cfg, 1.0)


def skewed(flights, factors, seed: int = 3):
    """The flights with measurement noise 0.05·√k of ``factors[i]`` (3,) per axis on flight i (stated σ 0.05)."""
    rng = np.random.default_rng(seed)
    return [
        dataclasses.replace(cf, z=cf.v_body_true + 0.05 * np.sqrt(k) * rng.standard_normal(cf.z.shape))
        for cf, k in zip(flights, factors, strict=True)
    ]


def stage_args(folds: int, by: str = "objective") -> argparse.Namespace:
    """The options ``axis_stage`` reads, at a coarse search."""
    return argparse.Namespace(
        objective="posterior", workers=1, grid_points=1, max_evals=25, axis_folds=folds, axis_check_by=by
    )


def test_factors_every_flight_shares_carry_over_and_are_kept(calibration_flights, filter_point):
    """x stated 4 times too wide and z 4 times too narrow on both flights: the factors fitted on one flight lower
    the other's NLL, so the fit on both is kept."""
    flights = skewed(calibration_flights, [np.array([0.25, 1.0, 4.0])] * 2)
    stage = axis_stage(flights, filter_point, AXES, stage_args(2), lambda _: None)
    text = "\n".join(stage.lines)
    assert "held out by flight (2 folds" in text and "they carry over, so the fit on every flight is kept" in text
    held = next(line for line in stage.lines if line.startswith("  held out, "))
    before, after = (float(x) for x in held.split("fused AVE ")[1].split(" m/s")[0].split(" -> "))
    assert after < before, held  # the factors that carry over improve the fused estimate too: no weak verdict
    assert not any("weak" in line for line in stage.lines)
    axes = stage.point.axes
    assert axes[0] < 1.0 < axes[2], axes
    assert stage.values == dict(zip(AXES, axes, strict=True)) and "kept at the start's" not in stage.label


def test_factors_the_flights_disagree_on_stay_at_the_start(calibration_flights, filter_point):
    """Flight 0's noise 4 times its stated variance on x and z, flight 1's as stated: the factors fitted on flight 0
    over-inflate flight 1, those fitted on flight 1 leave flight 0 as the start does, so the held-out NLL rises and
    the stage keeps the start's factors, saying so. Unchecked (``--axis-folds 0``) the fit on both is kept."""
    flights = skewed(calibration_flights, [np.array([4.0, 1.0, 4.0]), np.ones(3)])
    checked = axis_stage(flights, filter_point, AXES, stage_args(2), lambda _: None)
    text = "\n".join(checked.lines)
    assert "they do not carry over, so the factors stay at the start's 1, 1, 1" in text, text
    assert checked.point.axes == (1.0, 1.0, 1.0) and checked.values == dict.fromkeys(AXES, 1.0)
    assert checked.label.endswith("kept at the start's by the check by folds of flights")
    held = [line for line in checked.lines if line.startswith("  held out, ")]
    before, after = (float(x) for x in held[0].split(": ")[1].split(" nats")[0].split(" -> "))
    assert after > before
    unchecked = axis_stage(flights, filter_point, AXES, stage_args(0), lambda _: None)
    assert not any("held out by flight" in line for line in unchecked.lines)
    assert unchecked.point.axes[0] > 1.3 and unchecked.point.axes[2] > 1.3, unchecked.point.axes
    assert unchecked.passes < checked.passes
