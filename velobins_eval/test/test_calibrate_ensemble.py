"""velobins_eval.calibrate_ensemble: an ensemble's weight on its disagreement, fitted with s by a profile over b/s,
on short simulated flights whose errors grow with a disagreement the test gives them."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest

from velobins_data.sim.presets import get_preset
from velobins_ekf.config import EkfConfig
from velobins_eval import calibrate_ensemble
from velobins_eval.calibrate import run_stage
from velobins_eval.calibrate_ensemble import disagreement_stage, folded, reference_ratio
from velobins_eval.calibrate_fit import DISAGREEMENT, SCALE, CalibrationRefused, Objective, Point, consistency
from velobins_eval.calibrate_search import SIMPLEX_STEP, fit_noise


@pytest.fixture(scope="module")
def flights(calibration_flights):
    """conftest's two simulated nano flights with 0.05 m/s measurements."""
    return calibration_flights


def disagreeing_flights(flights, b: float, seed: int):
    """``flights`` as an ensemble would measure them: the stated variance σ̂² (0.05²) is right on the first flight,
    while on the second the errors are larger by b·d̄, d̄ the disagreement the ensemble reports (a small d̄ on the
    first, so both flights carry one): R = σ̂² + b·d̄ is the truth there."""
    rng = np.random.default_rng(seed)
    out = []
    for i, cf in enumerate(flights):
        dis = np.full_like(cf.var, 1e-6 if i == 0 else 1e-3)
        err = rng.normal(0.0, 1.0, cf.z.shape) * np.sqrt(cf.var + b * dis)
        out.append(dataclasses.replace(cf, z=cf.v_body_true + err, dis=dis))
    return out


def test_an_ensembles_disagreement_weight_is_fitted_by_its_profile(flights, monkeypatch):
    """The profile over b/s, started as the command starts it (s at the network's own best), finds the weight that
    makes the second flight's larger errors expected (b = 20 true), prints the objective at every ratio, and the
    fitted filter is more consistent than s alone would make it. Without the warm start (every fit of s from the
    network's own s, a quarter-decade simplex) it finds the same s and b in more filter passes. A shorter first
    grid of ratios than the command's, to keep the test short."""
    monkeypatch.setattr(calibrate_ensemble, "DISAGREEMENT_RATIOS", (0.0, 1.0, 4.0, 16.0))

    data = disagreeing_flights(flights, 20.0, seed=3)
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    args = argparse.Namespace(objective="posterior", workers=1, grid_points=1, max_evals=60)
    said: list[str] = []
    point = Point(cfg, 1.0)
    stage = disagreement_stage("ensemble", data, point, [SCALE], args, said.append, point, run_stage)
    b, s = stage.values[DISAGREEMENT], stage.values[SCALE]
    assert 20.0 / 2.5 < b < 20.0 * 2.5 and 1 / 2.5 < s < 2.5, stage.values
    assert stage.point.disagreement == b and stage.point.scale == s
    assert stage.lines[0].startswith("profile of the objective over b/s") and "0 → " in stage.lines[0]
    alone = fit_noise(Objective(data, "posterior"), point, [SCALE], max_evals=20, progress=False)
    assert stage.objective < alone.objective
    fitted = consistency(folded(data, b / s), cfg, s)["nees_in_bounds"]
    assert fitted > consistency(data, cfg, alone.values[SCALE])["nees_in_bounds"]

    monkeypatch.setattr(calibrate_ensemble, "WARM_STEP", SIMPLEX_STEP)
    monkeypatch.setattr(calibrate_ensemble, "warm_scale", lambda ratio, rho, own, fits: own[ratio])
    cold = disagreement_stage("ensemble", data, point, [SCALE], args, lambda _: None, point, run_stage)
    for name in (SCALE, DISAGREEMENT):
        assert stage.values[name] == pytest.approx(cold.values[name], rel=0.03), (stage.values, cold.values)
    assert stage.passes < cold.passes, (stage.passes, cold.passes)


def test_members_that_never_disagree_are_refused(flights):
    same = [dataclasses.replace(cf, dis=np.zeros_like(cf.var)) for cf in flights]
    with pytest.raises(CalibrationRefused, match="never disagree"):
        reference_ratio(same)


def test_folding_adds_the_weighted_disagreement_and_leaves_single_networks_alone(flights):
    with_dis = [dataclasses.replace(flights[0], dis=np.full_like(flights[0].var, 0.01)), flights[1]]
    out = folded(with_dis, 3.0)
    np.testing.assert_allclose(out[0].var, flights[0].var + 0.03)
    assert out[1] is flights[1] and folded(with_dis, 0.0)[0] is with_dis[0]


def _fake_fit(objective_of_ratio, calls: list):
    """A stand-in for ``calibrate.run_stage`` whose objective is ``objective_of_ratio(b/s)``, read back from the
    folded flights (their variance grew by ratio·d̄, d̄ = 1 here), with s = 2 at every ratio."""
    from velobins_eval.calibrate import Stage

    def fit(label, data, start, names, args, log, initial, kind=None, uncertainty=True, step=0.25):
        ratio = float(np.median(data[0].var - 1.0))
        calls.append((ratio, uncertainty))
        point = dataclasses.replace(start, scale=2.0)
        return Stage(label, point, {SCALE: 2.0}, 1, ["curvature"] if uncertainty else [], objective_of_ratio(ratio))

    return fit


def _unit_flights(flights):
    """Flights whose variance is 1 and disagreement 1 everywhere (ρ = 1)."""
    return [dataclasses.replace(cf, var=np.ones_like(cf.var), dis=np.ones_like(cf.var)) for cf in flights]


def test_the_profile_keeps_and_refines_an_inner_optimum(flights):
    calls: list = []
    fit = _fake_fit(lambda r: (np.log2(r + 1e-9) - np.log2(6.0)) ** 2 if r > 0 else 99.0, calls)
    stage = disagreement_stage("e", _unit_flights(flights), Point(EkfConfig(), 1.0), [SCALE], None, print, None, fit)
    assert stage.values[DISAGREEMENT] == pytest.approx(2.0 * 8.0)  # b = ratio × s; 8 = 4 × 2, the refined best
    assert stage.lines[0].startswith("profile of the objective over b/s (ρ = 1)") and "alone" not in stage.lines[0]
    assert stage.lines[-1] == "curvature" and calls[-1] == (8.0, True)  # only the kept ratio gets its curvature
    assert all(not u for _, u in calls[:-1])


def test_a_profile_still_falling_at_its_end_is_kept_and_said(flights):
    calls: list = []
    fit = _fake_fit(lambda r: -r, calls)
    stage = disagreement_stage("e", _unit_flights(flights), Point(EkfConfig(), 1.0), [SCALE], None, print, None, fit)
    assert stage.values[DISAGREEMENT] == pytest.approx(2.0 * 64.0 * 4**3)  # three ×4 steps past 64ρ
    assert "d̄ alone sets R" in stage.lines[0]


def test_each_ratio_after_the_first_starts_where_the_last_fit_put_the_filter(flights):
    """The filter's s is a steady multiple of the network's own (5× here, as errors correlated in time make it): from
    the second ratio on, each fit of s starts at that multiple of its own s, not at the own s (the first ratio's
    start), so it starts at its optimum."""
    from velobins_eval.calibrate import Stage
    from velobins_eval.calibrate_errors import own_scale

    starts: list[tuple[float, float]] = []

    def fit(label, data, start, names, args, log, initial, kind=None, uncertainty=True, step=0.25):
        best = 5.0 * own_scale(data)
        starts.append((initial.scale, best, step))
        return Stage(label, dataclasses.replace(start, scale=best), {SCALE: best}, 1, [], -abs(np.log(best)))

    data = disagreeing_flights(flights, 20.0, seed=3)
    point = Point(EkfConfig(), 1.0)
    disagreement_stage("e", data, point, [SCALE], None, print, point, fit)
    assert len(starts) > 3
    assert starts[0][0] == pytest.approx(starts[0][1] / 5.0) and starts[0][2] == SIMPLEX_STEP
    for first, best, step in starts[1:]:  # the kept ratio's refit too, from its optimum
        assert first == pytest.approx(best) and step == calibrate_ensemble.WARM_STEP


def test_warm_scale_takes_the_factor_of_the_nearest_ratio():
    from types import SimpleNamespace

    fits = {0.0: SimpleNamespace(point=Point(EkfConfig(), 3.0)), 16.0: SimpleNamespace(point=Point(EkfConfig(), 8.0))}
    own = {0.0: 1.0, 16.0: 2.0, 0.25: 1.5, 32.0: 0.5}
    assert calibrate_ensemble.warm_scale(0.25, 1.0, own, {}) == 1.5  # nothing fitted yet: the own s
    assert calibrate_ensemble.warm_scale(32.0, 1.0, own, fits) == pytest.approx(0.5 * 8.0 / 2.0)  # 16's factor
    assert calibrate_ensemble.warm_scale(0.25, 1.0, own, fits) == pytest.approx(1.5 * 3.0 / 1.0)  # 0's factor
