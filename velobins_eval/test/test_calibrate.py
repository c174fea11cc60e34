"""``velobins calibrate``: the fit (calibrate_fit: objectives, search box widening and refusal) and the command in
its three modes (synthetic, held-out, cross-fit) end to end on short simulated flights.

Small on purpose (15 s simulated flights, tiny networks, coarse searches): the full-size measurements are in
docs/calibrate.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

from velobins_common.errors import OptionError
from velobins_data.datasets.csv_format import write_csv
from velobins_data.sim.presets import get_preset
from velobins_ekf.config import EkfConfig
from velobins_ekf.params import load_filter_config
from velobins_eval.calibrate import fitted_by_likelihood, spread
from velobins_eval.calibrate_errors import (
    axis_motion,
    error_persistence_line,
    floor_start,
    network_lines,
    variance_scale,
    velocity_error_start,
)
from velobins_eval.calibrate_fit import (
    AXES,
    AXIS_FACTORS,
    FLOOR,
    SCALE,
    SCALE_LIMITS,
    VELOCITY_ERROR,
    CalibrationRefused,
    Objective,
    Point,
    consistency,
    innovation_nll,
)
from velobins_eval.calibrate_report import overlay_text, yaml_float
from velobins_eval.calibrate_search import EDGE_DECADES, GRID_LOG10, fit_noise
from velobins_eval.cli import main as cli_main
from velobins_eval.cli.calibrate import main_calibrate

FACTOR = 3.0
"""The fitted densities must lie within this factor of the simulator's (2 flights of 15 s: a weak signal)."""


@pytest.fixture(scope="module")
def flights(calibration_flights):
    """conftest's two simulated nano flights with 0.05 m/s measurements."""
    return calibration_flights


@pytest.mark.parametrize("kind", ["innovation", "posterior"])
def test_fit_lands_near_the_simulated_noise_and_fixes_consistency(flights, kind):
    """With white measurement noise of the stated σ both objectives recover the simulator's IMU noise."""
    truth = get_preset("nano").imu
    bad = dataclasses.replace(EkfConfig(), acc_noise_density=5e-4, gyro_noise_density=5e-5)  # 20x too confident
    fit = fit_noise(Objective(flights, kind), Point(bad, 1.0), grid_points=3, max_evals=20, progress=False)
    acc, gyro = fit.point.config.acc_noise_density, fit.point.config.gyro_noise_density
    assert truth.acc_density / FACTOR < acc < truth.acc_density * FACTOR, acc
    assert truth.gyro_density / FACTOR < gyro < truth.gyro_density * FACTOR, gyro
    assert fit.objective < fit.start_objective
    before, after = consistency(flights, bad), consistency(flights, fit.point.config)
    assert after["nees_in_bounds"] > before["nees_in_bounds"] + 0.2, (before, after)
    assert after["nees_in_bounds"] > 0.8
    assert 1.0 < after["nees_median"] < 4.0


def test_posterior_objective_recovers_the_measurement_scale(flights):
    """Measurements whose stated variance is 4x too small: the posterior fit of s lands near 4 (densities fixed)."""
    wrong = [dataclasses.replace(cf, var=cf.var / 4.0) for cf in flights]
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    fit = fit_noise(Objective(wrong, "posterior"), Point(cfg, 1.0), [SCALE], max_evals=30, progress=False)
    assert 2.0 < fit.values[SCALE] < 8.0, fit.values


def test_axis_factors_are_recovered_on_simulated_flights(flights):
    """Measurement noise of 0.5, 1 and 4 times the stated variance on x, y, z. The innovation likelihood, exact for
    white noise, recovers the three factors with s held; the posterior objective keeps their order and makes the
    filter consistent, but also absorbs the filter's other errors (it inflates z most: docs/calibrate.md)."""
    k = np.array([0.5, 1.0, 4.0])
    rng = np.random.default_rng(1)
    skewed = [
        dataclasses.replace(cf, z=cf.v_body_true + 0.05 * np.sqrt(k) * rng.standard_normal(cf.z.shape))
        for cf in flights
    ]
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    exact = fit_noise(Objective(skewed, "innovation"), Point(cfg, 1.0), AXES, max_evals=80, progress=False)
    fitted = np.array([exact.values[n] for n in AXES])
    assert np.all(np.abs(np.log(fitted / k)) < np.log(1.25)), fitted
    assert exact.point.axes == tuple(fitted) and exact.point.scale == 1.0  # s held
    posterior = fit_noise(Objective(skewed, "posterior"), Point(cfg, 1.0), AXES, max_evals=80, progress=False)
    axes = posterior.point.axes
    assert axes[0] < axes[1] < axes[2], axes
    before, after = consistency(skewed, cfg, 1.0), consistency(skewed, cfg, posterior.point.factors)
    assert after["nees_in_bounds"] > max(0.9, before["nees_in_bounds"] + 0.1), (before, after)


def test_fit_names_expand_the_axis_factors():
    """``--fit ...,axis_variance_factors`` is the three axes; a repeated axis is refused like any repeated name."""
    from velobins_eval.calibrate_fit import check_fit_names

    assert check_fit_names([SCALE, AXIS_FACTORS]) == (SCALE, *AXES)
    assert check_fit_names([AXES[2]]) == (AXES[2],)
    with pytest.raises(OptionError, match=AXIS_FACTORS):
        check_fit_names([AXIS_FACTORS, AXES[0]])


def seconds(line: str) -> list[float]:
    """The per-axis times of an :func:`error_persistence_line`."""
    return [float(x) for x in re.findall(r"([0-9.]+(?:e-?[0-9]+)?) s\b", line.split(" (x, y, z")[0])]


def test_error_persistence_says_how_long_the_errors_last(flights):
    """White measurement errors last less than one interval; Gauss-Markov ones with τ = 0.5 s about 0.5 s."""
    white = error_persistence_line(flights)
    dt = float(np.median(np.diff(flights[0].t)))
    times = seconds(white)
    assert len(times) == 3 and all(x < dt for x in times), white
    assert f"{dt * 1e3:.0f} ms apart" in white
    rng = np.random.default_rng(5)
    phi = math.exp(-dt / 0.5)
    lasting = []
    for cf in flights:
        e = np.empty_like(cf.z)
        e[0] = rng.standard_normal(3)
        for k in range(1, len(e)):
            e[k] = phi * e[k - 1] + math.sqrt(1 - phi * phi) * rng.standard_normal(3)
        lasting.append(dataclasses.replace(cf, z=cf.v_body_true + 0.05 * e))
    line = error_persistence_line(lasting)
    times = seconds(line)
    assert len(times) == 3 and all(0.33 < x < 0.75 for x in times), line


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


def test_scale_limits_are_the_predictors():
    from velobins_common.fields import param_spec
    from velobins_net.inference import PredictorConfig

    for name in (SCALE, AXIS_FACTORS):
        spec = param_spec(next(f for f in dataclasses.fields(PredictorConfig) if f.name == name))
        assert (spec.min, spec.max) == SCALE_LIMITS, name


class Bowl:
    """A quadratic bowl in log₁₀(acc), log₁₀(gyro): a known objective to test the search itself."""

    kind = "posterior"  # what fit_noise reads of an Objective beside calling it: the unit of its lines

    def __init__(self, acc: float, gyro: float):
        self.centre = np.log10([acc, gyro])
        self.evaluations = 0

    def __call__(self, point: Point) -> float:
        self.evaluations += 1
        x = np.log10([point.config.acc_noise_density, point.config.gyro_noise_density])
        return float(np.sum((x - self.centre) ** 2))


def test_fit_beyond_the_first_box_widens_the_search_and_says_so():
    lines: list[str] = []
    lo = 10 ** GRID_LOG10["acc_noise_density"][0]
    fit = fit_noise(Bowl(lo / 20.0, 1e-3), Point(EkfConfig(), 1.0), grid_points=3, progress=False, log=lines.append)
    assert fit.values["acc_noise_density"] == pytest.approx(lo / 20.0, rel=0.05)
    assert fit.values["gyro_noise_density"] == pytest.approx(1e-3, rel=0.05)
    assert fit.widened and "acc_noise_density" in fit.widened[0] and "lower edge" in fit.widened[0]
    assert fit.widened[0] in lines
    assert fit.boxes["acc_noise_density"][0] < GRID_LOG10["acc_noise_density"][0]


def test_fit_at_a_hard_limit_is_refused():
    # the bowl's centre lies below acc_noise_density's ParamSpec minimum (1e-6): the fit runs into it
    with pytest.raises(CalibrationRefused, match="acc_noise_density ended at a bound of its search, its lower limit"):
        fit_noise(Bowl(1e-8, 1e-3), Point(EkfConfig(), 1.0), grid_points=1, max_evals=200, progress=False)
    assert EDGE_DECADES < 0.1


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


FAST = ["--grid-points", "1", "--max-evals", "4"]


def test_cli_synthetic_end_to_end(data_dir, tmp_path, capsys):
    out = tmp_path / "sub" / "overlay.yaml"
    argv = ["calibrate", "--dataset", "csv", "--data", str(data_dir), "--imu-noise", "synthetic", "--out", str(out)]
    assert cli_main(argv + FAST) == 0
    cfg = load_filter_config([out])
    assert math.isfinite(cfg.acc_noise_density) and cfg.acc_noise_density > 0
    text = out.read_text()
    assert "/**/velobins_ekf:" in text and "Command: velobins calibrate" in text and "NEES" in text
    assert "velobins_net" not in text  # no network, no variance scale
    printed = capsys.readouterr().out
    assert "| before (defaults) |" in printed and "| after (fitted) |" in printed
    assert "uncertainty of the fit" in printed and "acc_noise_density" in printed and "calibrate took" in printed

    assert cli_main(argv + FAST) == 2  # existing output refused without --overwrite
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "--overwrite" in err[0]
    assert out.read_text() == text

    bad = ["calibrate", "--dataset", "csv", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "o.yaml")]
    assert cli_main(bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing" in err[0]
    assert not (tmp_path / "o.yaml").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--checkpoint", "x.pt"], "--checkpoint: needs --heldout"),
        (["--fit", "gravity"], "--fit"),
        (["--fit", SCALE], "needs network estimates"),
        (["--fit", "velocity_error_sigma"], "needs network estimates"),
        (["--checkpoint", "x.pt", "--heldout", "h"], "--heldout/--data: give one"),
        (["--heldout", "h", "--cross-fit", "2"], "--heldout/--cross-fit: give one"),
        (["--cross-fit", "1"], "--cross-fit: must be >= 2"),
        (["--cross-fit", "2", "--fold-minutes", "0"], "--fold-minutes"),
        (["--folds-dir", "f"], "--cross-fit only"),
        (["--meas-sigma", "nan"], "--meas-sigma"),
        (["--objective", "accuracy"], "--objective: accuracy fits the network's fields only"),
        (["--cross-fit", "2", "--imu-noise", "network", "--objective", "accuracy"], "--objective: accuracy"),
        (["--cross-fit", "2", "--fit", "acc_noise_density", "--objective", "accuracy"], "--objective: accuracy"),
        (["--objective", "crps"], "--objective: crps fits the network's fields only"),
        (["--workers", "0"], "--workers"),
        (["--axis-folds", "1"], "--axis-folds: must be 0 \\(no check\\) or >= 2"),
        (["--axis-folds", "-2"], "--axis-folds"),
        (["--fit", AXIS_FACTORS], "needs network estimates"),
        (["--cross-fit", "2", "--imu-noise", "network", "--fit", f"{SCALE},{AXIS_FACTORS}"], "not with --imu-noise"),
    ],
)
def test_cli_option_errors(data_dir, tmp_path, extra, message):
    base = ["--dataset", "csv", "--data", str(data_dir), "--out", str(tmp_path / "o.yaml")]
    with pytest.raises(OptionError, match=message):
        main_calibrate([*base, *extra])
    assert not (tmp_path / "o.yaml").exists()


def test_cli_synthetic_fit_ignores_the_network_fields_of_params(data_dir, tmp_path, capsys):
    """Synthetic measurements carry the known σ² of their noise: an overlay's s and axis factors (the network's) must
    not scale them, so the IMU fit is the same with them as without; the overlay still carries them (kept)."""
    params = tmp_path / "net.yaml"
    params.write_text(
        "/**/velobins_net:\n  ros__parameters:\n    predictor:\n      variance_scale: 4.0\n"
        "      axis_variance_factors: [1.0, 1.0, 9.0]\n"
    )
    base = ["calibrate", "--dataset", "csv", "--data", str(data_dir), "--imu-noise", "synthetic", "--max-evals", "12"]
    assert cli_main([*base, "--out", str(tmp_path / "plain.yaml")]) == 0
    said = capsys.readouterr().out
    assert cli_main([*base, "--params", str(params), "--out", str(tmp_path / "net.yaml.out")]) == 0
    said_net = capsys.readouterr().out
    plain, net = load_filter_config([tmp_path / "plain.yaml"]), load_filter_config([tmp_path / "net.yaml.out"])
    assert (net.acc_noise_density, net.gyro_noise_density) == (plain.acc_noise_density, plain.gyro_noise_density)
    objectives = [re.findall(r"(?:grid|refinement).*?objective (-?[0-9.]+)", s) for s in (said, said_net)]
    assert objectives[0] and objectives[0] == objectives[1]  # the same objective at every stage of the search
    assert "kept from --params (not fitted): variance_scale 4, axis_variance_factors.z 9" in said_net
    from velobins_net.inference import load_predictor_config

    kept = load_predictor_config([tmp_path / "net.yaml.out"])
    assert (kept.variance_scale, kept.axis_variance_factors) == (4.0, (1.0, 1.0, 9.0))


def test_cli_shipped_model_brings_its_overlay(tmp_path, capsys):
    """``--checkpoint crazyflie`` resolves the name and starts from the model's overlay unless --params is given
    (held-out mode on a demo flight, which the shipped model never trained on)."""
    from velobins_eval.demo import DEMO_DATA
    from velobins_net.pretrained import resolve_model

    overlay = resolve_model("crazyflie").overlay
    out = tmp_path / "overlay.yaml"
    base = ["calibrate", "--dataset", "nanobench", "--heldout", str(DEMO_DATA / "B3_figure8_medium_rep1.csv.gz")]
    base += ["--checkpoint", "crazyflie", "--fit", SCALE, "--grid-points", "1", "--max-evals", "2"]
    assert cli_main([*base, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"parameters: {overlay}" in printed and "| before (crazyflie.yaml) |" in printed
    assert "network errors stay correlated for" in printed  # the held-out estimates' persistence
    assert "| before (crazyflie.yaml) | 0.07009 | 0.03634 |" in out.read_text().replace("# ", "")  # its densities
    # only s was fitted: the overlay carries the densities it started from, so it alone configures the vehicle
    kept = load_filter_config([out])
    assert (kept.acc_noise_density, kept.gyro_noise_density) == (0.07009, 0.03634)
    assert "kept from --params (not fitted): acc_noise_density 0.07009, gyro_noise_density 0.03634" in printed
    assert "# kept from --params (not fitted)" in out.read_text() and "variance_scale:" in out.read_text()

    defaults = tmp_path / "defaults.yaml"
    defaults.write_text("/**/velobins_ekf:\n  ros__parameters:\n    filter:\n      acc_noise_density: 0.02\n")
    assert cli_main([*base, "--params", str(defaults), "--out", str(tmp_path / "o2.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "parameters:" not in printed and "| before (defaults.yaml) | 0.02 |" in printed
    assert "kept from" not in printed  # 0.02 is the node's own value: nothing to carry
    assert "velobins_ekf" not in (tmp_path / "o2.yaml").read_text()


def gauss_markov_errors(flights, sigma: float, tau: float, seed: int):
    """``flights`` with a first-order Gauss-Markov error (σ, τ) added to their measurements (stated σ̂ unchanged)."""
    rng = np.random.default_rng(seed)
    out = []
    for cf in flights:
        phi = math.exp(-float(np.median(np.diff(cf.t))) / tau)
        e = np.empty_like(cf.z)
        e[0] = rng.normal(0.0, sigma, 3)
        for k in range(1, len(e)):
            e[k] = phi * e[k - 1] + rng.normal(0.0, sigma * math.sqrt(1 - phi * phi), 3)
        out.append(dataclasses.replace(cf, z=cf.z + e))
    return out


def test_slow_measurement_error_is_fitted_from_where_calibrate_starts_it(flights):
    """Measurements with a slow error (σ_b 0.3 m/s, τ 0.5 s) beside their stated white 0.05 m/s: calibrate starts
    σ_b at their RMS and τ at how long they last, the fit lands near the truth, and the filter it gives is
    consistent where the white one (s fitted alone) is not."""
    slow = gauss_markov_errors(flights, 0.3, 0.5, seed=8)
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    said: list[str] = []
    start = velocity_error_start(Point(cfg, 1.0), slow, list(VELOCITY_ERROR), said.append)
    assert 0.2 < start.config.velocity_error_sigma < 0.45 and 0.25 < start.config.velocity_error_tau < 1.0
    # fitted or not, τ starts at the errors' correlation time; not fitted, the line says it is kept
    assert velocity_error_start(Point(cfg, 1.0), slow, ["velocity_error_sigma"], said.append) == start
    assert "kept" not in said[0] and "kept" in said[1]
    fit = fit_noise(Objective(slow, "posterior"), start, list(VELOCITY_ERROR), max_evals=30, progress=False)
    sigma, tau = fit.values["velocity_error_sigma"], fit.values["velocity_error_tau"]
    assert 0.3 / 1.5 < sigma < 0.3 * 1.5, fit.values  # 0.334 when written
    assert 0.5 / 2 < tau < 0.5 * 2, fit.values  # 0.552
    white = fit_noise(Objective(slow, "posterior"), Point(cfg, 1.0), [SCALE], max_evals=30, progress=False)
    assert fit.objective < white.objective
    gm = consistency(slow, fit.point.config)
    assert (
        gm["nees_in_bounds"] > 0.8
        and gm["nees_in_bounds"] > consistency(slow, cfg, white.values[SCALE])["nees_in_bounds"]
    )


def test_a_fitted_error_faster_than_the_estimates_is_called_a_floor(flights):
    """τ below the estimates' spacing makes b white noise beside s·σ̂²: the report says so; a slow one it does not."""
    fast = Point(EkfConfig(velocity_error_sigma=2.0, velocity_error_tau=0.02), 30.0)
    slow = Point(EkfConfig(velocity_error_sigma=2.0, velocity_error_tau=0.5), 30.0)
    assert any("a floor under the network's variance" in line for line in network_lines(flights, 1.0, fast))
    assert not any("floor" in line for line in network_lines(flights, 1.0, slow))


def test_the_factor_report_says_how_the_flights_move_along_each_axis(flights):
    """With axis factors fitted, the report gives the flights' RMS speed per body axis (what the factors follow):
    a rotation of the true velocity (its norm is the world speed's), pooled inside the per-flight span; without
    factors there is no such line."""
    pooled, per_flight = axis_motion(flights)
    world = np.concatenate([cf.v_true for cf in flights])
    assert np.sum(pooled**2) == pytest.approx(np.mean(np.sum(world**2, axis=1)), rel=1e-9)
    assert per_flight.shape == (len(flights), 3)
    assert np.all(per_flight.min(axis=0) <= pooled + 1e-12) and np.all(pooled <= per_flight.max(axis=0) + 1e-12)
    fitted = Point(EkfConfig(), 2.0, axes=(0.5, 1.0, 2.0))
    line = [x for x in network_lines(flights, 1.0, fitted) if "RMS body speed" in x]
    assert len(line) == 1 and ", ".join(f"{x:.2f}" for x in pooled) + " m/s" in line[0]
    assert not any("RMS body speed" in x for x in network_lines(flights, 1.0, Point(EkfConfig(), 2.0)))


def test_a_noise_floor_is_fitted_from_where_calibrate_starts_it(flights):
    """Measurements whose white noise is 0.05 m/s as stated plus 0.3 m/s the statement leaves out: the floor starts
    at 0.3 × their RMS and its fit lands near 0.3."""
    rng = np.random.default_rng(9)
    noisy = [dataclasses.replace(cf, z=cf.z + rng.normal(0.0, 0.3, cf.z.shape)) for cf in flights]
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    said: list[str] = []
    start = floor_start(Point(cfg, 1.0), noisy, [FLOOR], said.append)
    assert 0.06 < start.config.velocity_noise_floor < 0.15 and "floor starts at" in said[0]
    assert floor_start(Point(cfg, 1.0), noisy, [SCALE], said.append) == Point(cfg, 1.0)  # not fitted: left at 0
    fit = fit_noise(Objective(noisy, "posterior"), start, [FLOOR], max_evals=20, progress=False)
    assert 0.2 < fit.values[FLOOR] < 0.45, fit.values


def test_accuracy_objective_is_the_fused_velocity_error(flights):
    """``--objective accuracy`` on one flight is ``velobins evaluate``'s fused AVE (same filter, same updates). With a
    slow error (σ 0.3 m/s, τ 0.5 s) the measurements' stated 0.05 m/s leaves out, the s it fits is larger than the
    posterior NLL's and the fused velocity more accurate, at the cost the report shows: a covariance too wide."""
    truth = get_preset("nano").imu
    cfg = dataclasses.replace(EkfConfig(), acc_noise_density=truth.acc_density, gyro_noise_density=truth.gyro_density)
    one = flights[:1]
    assert Objective(one, "accuracy")(Point(cfg, 1.0)) == pytest.approx(consistency(one, cfg)["ave"], rel=1e-9)
    slow = gauss_markov_errors(flights, 0.3, 0.5, seed=8)
    accurate = fit_noise(Objective(slow, "accuracy"), Point(cfg, 1.0), [SCALE], max_evals=20, progress=False)
    likely = fit_noise(Objective(slow, "posterior"), Point(cfg, 1.0), [SCALE], max_evals=20, progress=False)
    assert accurate.values[SCALE] > 3 * likely.values[SCALE], (accurate.values, likely.values)  # 8977 against 791
    a, p = consistency(slow, cfg, accurate.values[SCALE]), consistency(slow, cfg, likely.values[SCALE])
    assert a["ave"] < 0.9 * p["ave"], (a, p)  # 0.246 against 0.328 m/s
    assert a["nees_median"] < 1.0 < p["nees_median"], (a, p)  # 0.13 against 1.48 (ideal 2.37)
    # the CRPS, proper but linear in e/σ, lands between the two
    middle = fit_noise(Objective(slow, "crps"), Point(cfg, 1.0), [SCALE], max_evals=20, progress=False)
    assert likely.values[SCALE] < middle.values[SCALE] < accurate.values[SCALE], middle.values


def test_cli_accuracy_objective_says_what_it_minimised(tmp_path, capsys):
    """Held-out mode with ``--objective accuracy``: the table's objective is in m/s and the overlay names it."""
    from velobins_eval.demo import DEMO_DATA

    out = tmp_path / "overlay.yaml"
    args = ["calibrate", "--dataset", "nanobench", "--heldout", str(DEMO_DATA / "B3_figure8_medium_rep1.csv.gz")]
    args += ["--checkpoint", "crazyflie", "--fit", SCALE, "--objective", "accuracy", "--max-evals", "2"]
    assert cli_main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| s | objective [m/s] | AVE [m/s] |" in printed and "refinement: objective" in printed
    assert "Objective: fused velocity error per update (AVE) for the network's fields" in out.read_text()


def test_a_likelihood_stage_leaves_the_default_bias_sigmas_and_says_so():
    """The default ``--fit`` adds the initial bias sigmas for the Allan stage only (``args.allan_only``); a stage
    fitted by likelihood (the synthetic fallback, ``--imu-noise network``) drops them with a line, and fits them
    when ``--fit`` named them (``allan_only`` empty)."""
    names = ["acc_noise_density", "gyro_noise_density", "init_sigma_acc_bias", "init_sigma_gyro_bias"]
    said: list[str] = []
    default = argparse.Namespace(allan_only=("init_sigma_acc_bias", "init_sigma_gyro_bias"))
    assert fitted_by_likelihood(default, names, said.append) == names[:2]
    assert said == ["the filter keeps its init_sigma_acc_bias, init_sigma_gyro_bias: only the Allan variance "
                    "measures them by default"]  # fmt: skip
    said.clear()
    assert fitted_by_likelihood(argparse.Namespace(allan_only=()), names, said.append) == names and not said


def test_the_overlay_carries_the_disagreement_weight():
    text = overlay_text(["head"], {}, 0.5, 40.0)
    assert "variance_scale: 0.5" in text and "disagreement_scale: 40.0" in text and "velobins_ekf" not in text


def test_the_overlay_sets_the_predictor_the_node_loads(tmp_path):
    from velobins_net.inference import load_predictor_config

    path = tmp_path / "overlay.yaml"
    path.write_text(overlay_text(["head"], {"acc_noise_density": 0.2}, 0.5, 40.0))
    pcfg = load_predictor_config([path])
    assert (pcfg.variance_scale, pcfg.disagreement_scale) == (0.5, 40.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--heldout", "h", "--fit", "disagreement_scale"], "fitted with variance_scale"),
        (["--heldout", "h", "--fit", "variance_scale,disagreement_scale", "--imu-noise", "network"], "--imu-noise"),
    ],
)
def test_cli_disagreement_option_errors(tmp_path, extra, message):
    with pytest.raises(OptionError, match=message):
        main_calibrate(["--dataset", "csv", "--checkpoint", "x.pt", "--out", str(tmp_path / "o.yaml"), *extra])
    assert not (tmp_path / "o.yaml").exists()
