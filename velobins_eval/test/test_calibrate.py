"""``velobins calibrate``: the maximum-likelihood noise fit on simulated flights of known IMU noise, and the
command end to end (overlay written and loadable, existing output refused, bad data path).

Small on purpose (two short simulated flights, a coarse search): the full-size measurements are in
docs/calibrate.md.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from velobins_common.errors import OptionError
from velobins_data.datasets.csv_format import write_csv
from velobins_data.sim.flight import simulate_flight
from velobins_data.sim.presets import get_preset
from velobins_ekf.config import EkfConfig
from velobins_ekf.params import load_filter_config
from velobins_eval.calibrate import overlay_text, spread, yaml_float
from velobins_eval.calibrate_fit import (
    consistency,
    fit_noise,
    innovation_nll,
    synthetic_measurements,
    variance_scale,
)
from velobins_eval.cli import main as cli_main
from velobins_eval.cli.calibrate import main_calibrate

FACTOR = 3.0
"""The fitted densities must lie within this factor of the simulator's (2 flights of 15 s: a weak signal)."""


@pytest.fixture(scope="module")
def flights():
    """Two simulated nano flights (acc 0.01 m/s²/√Hz, gyro 0.001 rad/s/√Hz) with 0.05 m/s measurements."""
    seqs = [
        simulate_flight("nano", fam, 15.0, seed, index=i)
        for i, (fam, seed) in enumerate((("figure8", 1), ("helix", 2)))
    ]
    rng = np.random.default_rng(0)
    return [synthetic_measurements(s, 0.05, rng) for s in seqs]


def test_fit_lands_near_the_simulated_noise_and_fixes_consistency(flights):
    truth = get_preset("nano").imu
    bad = dataclasses.replace(EkfConfig(), acc_noise_density=5e-4, gyro_noise_density=5e-5)  # 20x too confident
    fit = fit_noise(flights, bad, grid_points=3, max_evals=25, progress=False)
    acc, gyro = fit.config.acc_noise_density, fit.config.gyro_noise_density
    assert truth.acc_density / FACTOR < acc < truth.acc_density * FACTOR, acc
    assert truth.gyro_density / FACTOR < gyro < truth.gyro_density * FACTOR, gyro
    assert fit.objective < fit.start_objective
    before, after = consistency(flights, bad), consistency(flights, fit.config)
    assert after["nees_in_bounds"] > before["nees_in_bounds"] + 0.2, (before, after)
    assert after["nees_in_bounds"] > 0.8
    assert 1.0 < after["nees_median"] < 4.0


def test_innovation_nll_is_the_gaussian_density():
    @dataclasses.dataclass
    class U:
        accepted: bool
        innovation: np.ndarray
        innovation_cov: np.ndarray
        nis: float

    s = np.diag([0.5, 2.0, 1.0])
    y = np.array([1.0, -1.0, 0.5])
    nis = float(y @ np.linalg.solve(s, y))
    total, n = innovation_nll([U(True, y, s, nis), U(False, y, s, nis)])
    from scipy.stats import multivariate_normal

    assert n == 1
    assert total == pytest.approx(-multivariate_normal(np.zeros(3), s).logpdf(y))


def test_variance_scale_is_the_closed_form_maximum():
    rng = np.random.default_rng(1)
    var = rng.uniform(0.01, 0.1, size=(4000, 3))
    err = rng.normal(0.0, np.sqrt(4.0 * var))
    assert variance_scale(err, var) == pytest.approx(4.0, rel=0.05)


def test_overlay_floats_and_subset():
    assert yaml_float(1e-5) == "1.0e-05" and yaml_float(0.1) == "0.1" and yaml_float(2.0) == "2.0"
    text = overlay_text(["head"], {"acc_noise_density": 1e-5}, 2.5)
    assert "variance_scale: 2.5" in text and text.startswith("# head\n")
    assert spread(list(range(10)), 3) == [0, 4, 9] and spread([1, 2], None) == [1, 2]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, flights) -> Path:
    """One short simulated flight as plain CSV (the command's --dataset csv)."""
    out = tmp_path_factory.mktemp("calib_data")
    write_csv(flights[0].flight, out / "flight.csv")
    return out


def test_cli_end_to_end(data_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "overlay.yaml"
    argv = ["calibrate", "--dataset", "csv", "--data", str(data_dir), "--out", str(out)]
    fast = ["--grid-points", "1", "--max-evals", "4"]
    assert cli_main(argv + fast) == 0
    cfg = load_filter_config([out])
    assert math.isfinite(cfg.acc_noise_density) and cfg.acc_noise_density > 0
    text = out.read_text()
    assert "/**/velobins_ekf:" in text and "Command: velobins calibrate" in text and "NEES" in text
    printed = capsys.readouterr().out
    assert "before (defaults)" in printed and "after (fitted)" in printed

    assert cli_main(argv + fast) == 2  # existing output refused without --overwrite
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "--overwrite" in err[0]
    assert out.read_text() == text

    bad = ["calibrate", "--dataset", "csv", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "o.yaml")]
    assert cli_main(bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]
    assert not (tmp_path / "o.yaml").exists()


def test_cli_option_errors(data_dir, tmp_path, capsys):
    base = ["--dataset", "csv", "--data", str(data_dir), "--out", str(tmp_path / "o.yaml")]
    with pytest.raises(OptionError, match="--checkpoint/--heldout: go together"):
        main_calibrate([*base, "--checkpoint", "x.pt"])
    with pytest.raises(OptionError, match="--fit"):
        main_calibrate([*base, "--fit", "gravity"])


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, data_dir) -> Path:
    """A one-epoch checkpoint trained on the calibration flight (enough to exercise the variance scale)."""
    run = tmp_path_factory.mktemp("calib_run") / "run"
    tiny = ["--epochs", "1", "--stride", "25", "--val-stride", "25", "--bins", "32", "--batch-size", "64"]
    args = [
        "train",
        "--dataset",
        "csv",
        "--data",
        str(data_dir),
        "--val",
        str(data_dir),
        *tiny,
        "--no-progress",
        "--out",
        str(run),
    ]
    assert cli_main(args) == 0
    return run / "best.pt"


def test_cli_network_variance_scale(data_dir, tiny_checkpoint, flights, tmp_path, capsys):
    from velobins_eval.calibrate import predictor_has_variance_scale

    heldout = tmp_path / "heldout"
    heldout.mkdir()
    write_csv(flights[1].flight, heldout / "other.csv")
    out = tmp_path / "overlay.yaml"
    base = ["calibrate", "--dataset", "csv", "--data", str(data_dir), "--grid-points", "1", "--max-evals", "2"]
    net = ["--checkpoint", str(tiny_checkpoint)]
    assert cli_main([*base, *net, "--heldout", str(data_dir), "--out", str(out)]) == 2  # training flights refused
    assert "also in --data" in capsys.readouterr().err and not out.exists()

    assert cli_main([*base, *net, "--heldout", str(heldout), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "unscaled (paper)" in printed and "| scaled |" in printed
    text = out.read_text()
    load_filter_config([out])
    if predictor_has_variance_scale():
        from velobins_net.inference import load_predictor_config

        assert load_predictor_config([out]).variance_scale > 0
    else:
        assert "variance_scale" not in text and "variance_scale not written" in printed


def test_cli_shipped_model_brings_its_overlay(tmp_path, capsys):
    """``--checkpoint crazyflie`` resolves the name and starts from the model's overlay unless --params is given."""
    from velobins_eval.demo import DEMO_DATA
    from velobins_net.pretrained import resolve_model

    overlay = resolve_model("crazyflie").overlay
    out = tmp_path / "overlay.yaml"
    base = ["calibrate", "--dataset", "nanobench", "--data", str(DEMO_DATA / "B2_circle_fast_rep1.csv.gz")]
    base += ["--heldout", str(DEMO_DATA / "B3_figure8_medium_rep1.csv.gz"), "--checkpoint", "crazyflie"]
    base += ["--grid-points", "1", "--max-evals", "1"]
    assert cli_main([*base, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"parameters: {overlay}" in printed and "| before (crazyflie.yaml) |" in printed
    assert "| before (crazyflie.yaml) | 0.07009 | 0.03634 |" in out.read_text().replace("# ", "")  # its densities

    defaults = tmp_path / "defaults.yaml"
    defaults.write_text("/**/velobins_ekf:\n  ros__parameters:\n    filter:\n      acc_noise_density: 0.02\n")
    assert cli_main([*base, "--params", str(defaults), "--out", str(tmp_path / "o2.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "parameters:" not in printed and "| before (defaults.yaml) | 0.02 |" in printed
