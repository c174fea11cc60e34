"""velobins_eval.calibrate_ensemble: an ensemble's weight on its disagreement, fitted with s by a profile over b/s,
on short simulated flights whose errors grow with a disagreement the test gives them."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest

from velobins_data.sim.flight import simulate_flight
from velobins_data.sim.presets import get_preset
from velobins_ekf.config import EkfConfig
from velobins_eval import calibrate_ensemble
from velobins_eval.calibrate import run_stage
from velobins_eval.calibrate_ensemble import disagreement_stage, folded, reference_ratio
from velobins_eval.calibrate_fit import (
    DISAGREEMENT,
    SCALE,
    CalibrationRefused,
    Objective,
    Point,
    consistency,
    fit_noise,
    synthetic_measurements,
)


@pytest.fixture(scope="module")
def flights():
    """Two simulated nano flights (15 s) with 0.05 m/s measurements, as test_calibrate's."""
    seqs = [
        simulate_flight("nano", fam, 15.0, seed, index=i)
        for i, (fam, seed) in enumerate((("figure8", 1), ("helix", 2)))
    ]
    rng = np.random.default_rng(0)
    return [synthetic_measurements(s, 0.05, rng) for s in seqs]


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
    """The profile over b/s finds the weight that makes the second flight's larger errors expected (b = 20 true),
    prints the objective at every ratio, and the fitted filter is more consistent than s alone would make it
    (a shorter first grid than the command's, to keep the test short)."""
    monkeypatch.setattr(calibrate_ensemble, "DISAGREEMENT_RATIOS", (0.0, 1.0, 4.0, 16.0))

    data = disagreeing_flights(flights, 20.0, seed=3)
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    args = argparse.Namespace(objective="posterior", workers=1, grid_points=1, max_evals=10)
    said: list[str] = []
    stage = disagreement_stage("ensemble", data, Point(cfg, 1.0), [SCALE], args, said.append, None, run_stage)
    b, s = stage.values[DISAGREEMENT], stage.values[SCALE]
    assert 20.0 / 2.5 < b < 20.0 * 2.5 and 1 / 2.5 < s < 2.5, stage.values
    assert stage.point.disagreement == b and stage.point.scale == s
    assert stage.lines[0].startswith("profile of the objective over b/s") and "0 → " in stage.lines[0]
    alone = fit_noise(Objective(data, "posterior"), Point(cfg, 1.0), [SCALE], max_evals=20, progress=False)
    assert stage.objective < alone.objective
    fitted = consistency(folded(data, b / s), cfg, s)["nees_in_bounds"]
    assert fitted > consistency(data, cfg, alone.values[SCALE])["nees_in_bounds"]


def test_members_that_never_disagree_are_refused(flights):
    same = [dataclasses.replace(cf, dis=np.zeros_like(cf.var)) for cf in flights]
    with pytest.raises(CalibrationRefused, match="never disagree"):
        reference_ratio(same)


def test_folding_adds_the_weighted_disagreement_and_leaves_single_networks_alone(flights):
    with_dis = [dataclasses.replace(flights[0], dis=np.full_like(flights[0].var, 0.01)), flights[1]]
    out = folded(with_dis, 3.0)
    np.testing.assert_allclose(out[0].var, flights[0].var + 0.03)
    assert out[1] is flights[1] and folded(with_dis, 0.0)[0] is with_dis[0]
