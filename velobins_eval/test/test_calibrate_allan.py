"""The Allan-variance IMU noise of ``velobins calibrate --imu-noise allan``: the closed forms, a static log and a
simulated flight whose noise is known, the refusals (truth not exact at the IMU rate, uneven stamps, mixed rates,
a noise-free IMU), and the command end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_data.datasets.csv_format import write_csv
from velobins_data.flight import Flight
from velobins_data.sim.flight import simulate_flight
from velobins_data.sim.imu import draw_imu_errors
from velobins_data.sim.presets import ImuNoise, get_preset
from velobins_ekf.params import load_filter_config
from velobins_eval.calibrate_allan import (
    BIAS_WINDOW,
    allan_noise,
    allan_sums,
    fit_white_and_walk,
    imu_errors,
    initial_bias_sigma,
)
from velobins_eval.calibrate_fit import CalibrationRefused
from velobins_eval.cli import main as cli_main

NOISE = ImuNoise(
    acc_density=0.02,
    acc_random_walk=0.01,
    acc_initial_bias_std=0.1,
    gyro_density=0.002,
    gyro_random_walk=2e-4,
    gyro_initial_bias_std=0.01,
)
"""A static log's IMU: random walks large enough to show within its 20 minutes."""


def static_log(seconds: float, rate_hz: float, seed: int, noise: ImuNoise = NOISE, name: str = "static") -> Flight:
    """The vehicle at rest, tilted, its truth constant: the IMU reads gravity in the body frame plus ``noise``."""
    n = int(seconds * rate_hz)
    q = Rotation.from_euler("xyz", [0.05, -0.03, 0.7]).as_quat()
    acc = np.tile(Rotation.from_quat(q).inv().apply([0.0, 0.0, 9.81]), (n, 1))
    gyro = np.zeros((n, 3))
    if noise is not None:
        err = draw_imu_errors(noise, n, rate_hz, np.random.default_rng(seed))
        acc, gyro = acc + err.acc_bias + err.acc_noise, gyro + err.gyro_bias + err.gyro_noise
    return Flight(
        name=name,
        t=np.arange(n) / rate_hz,
        acc=acc,
        gyro=gyro,
        rotor=np.zeros((n, 4)),
        rotor_kind="speed",
        p=np.zeros((n, 3)),
        q=np.tile(q, (n, 1)),
        v=np.zeros((n, 3)),
        metadata={"gravity": 9.81},
    )


def test_fit_of_the_two_term_curve_is_exact():
    taus = np.geomspace(0.01, 100.0, 25)
    n, k = 0.013, 0.0021
    got = fit_white_and_walk(taus, n**2 / taus + k**2 * taus / 3.0)
    np.testing.assert_allclose(got, (n, k), rtol=1e-9)
    assert fit_white_and_walk(taus, n**2 / taus)[1] == pytest.approx(0.0, abs=1e-9)


def test_allan_variance_of_white_noise_falls_as_one_over_tau():
    """σ²(τ) = σ_d²·τ₀/τ for white samples of std σ_d; sums and counts of two halves add to the whole."""
    tau0, sigma = 0.01, 0.3
    y = np.random.default_rng(1).normal(0.0, sigma, size=(200_000, 3))
    clusters = np.array([1, 4, 16, 64])
    sums, counts = allan_sums(y, tau0, clusters)
    np.testing.assert_allclose(sums / counts[:, None], (sigma**2 / clusters)[:, None] * np.ones(3), rtol=0.05)
    assert list(counts) == [200_001 - 2 * m for m in clusters]
    halves = [allan_sums(part, tau0, clusters) for part in (y[:100_000], y[100_000:])]
    assert np.all(halves[0][0] + halves[1][0] < sums * 1.1) and np.all(halves[0][1] + halves[1][1] < counts)


def test_static_log_gives_the_densities_and_random_walks():
    sensors = allan_noise([static_log(1200.0, 100.0, seed=3)])
    acc, gyro = sensors["acc"], sensors["gyro"]
    assert acc.density == pytest.approx(NOISE.acc_density, rel=0.05)
    assert gyro.density == pytest.approx(NOISE.gyro_density, rel=0.05)
    assert acc.walk_identified and gyro.walk_identified
    assert acc.random_walk == pytest.approx(NOISE.acc_random_walk, rel=0.35)
    assert gyro.random_walk == pytest.approx(NOISE.gyro_random_walk, rel=0.35)
    assert acc.slope == pytest.approx(-0.5, abs=0.05) and acc.misfit < 1.3
    values = acc.values(("acc_noise_density", "acc_random_walk", "gyro_noise_density"))
    assert values == {"acc_noise_density": acc.density, "acc_random_walk": acc.random_walk}


def test_initial_bias_sigma_takes_out_the_white_noise_and_never_falls_below_it():
    """Values of RMS b about zero carry the white noise's r² beside the true spread: √(b² − r²); a spread the noise
    hides is reported as r, never as 0 (a filter sure of a zero bias could not learn one)."""
    assert initial_bias_sigma(np.array([[0.05, -0.05, 0.05]]), 0.03) == pytest.approx(0.04)
    assert initial_bias_sigma(np.full((4, 3), 0.01), 0.03) == pytest.approx(0.03)
    assert initial_bias_sigma(np.zeros((2, 3)), 1e-4) == pytest.approx(1e-4)


def test_initial_biases_are_each_flights_turn_on_bias_and_their_spread_the_filters_prior():
    """Twelve 30 s static logs, each with its own turn-on bias drawn by the simulator: each log's measured bias is
    the drawn one over the first BIAS_WINDOW seconds to within the white noise's share, and their spread gives the
    drawn std (0.1 m/s², 0.01 rad/s) to within what 36 values allow."""
    rate = 100.0
    logs = [static_log(30.0, rate, seed=20 + i, name=f"s{i}") for i in range(12)]
    sensors = allan_noise(logs)
    n = round(BIAS_WINDOW * rate)
    for sensor, std in (("acc", NOISE.acc_initial_bias_std), ("gyro", NOISE.gyro_initial_bias_std)):
        fit = sensors[sensor]
        assert fit.initial_biases.shape == (12, 3) and fit.bias_window == pytest.approx(BIAS_WINDOW, rel=0.01)
        drawn = np.array([
            getattr(draw_imu_errors(NOISE, int(30.0 * rate), rate, np.random.default_rng(20 + i)), f"{sensor}_bias")[
                1 : n + 1
            ].mean(axis=0)
            for i in range(12)
        ])  # fmt: skip
        np.testing.assert_allclose(fit.initial_biases, drawn, atol=4.0 * fit.bias_resolution)
        assert fit.initial_bias_sigma == pytest.approx(std, rel=0.35)
        field = f"init_sigma_{sensor}_bias"
        assert fit.values((field,)) == {field: fit.initial_bias_sigma}
        assert "initial bias over the first 5 s of 12 flight(s)" in fit.lines((field,))[1]
        assert "(×/÷ 1.12, 1σ from 36 values" in fit.lines((field,))[1]  # 1 + 1/√72
        assert f"not in --fit, the filter keeps its {field}" in fit.lines(())[1]


@pytest.fixture(scope="module")
def flown() -> list[Flight]:
    """Two 15 s simulated nano flights (acc 0.01 m/s²/√Hz, gyro 0.001 rad/s/√Hz; truth exact at 100 Hz)."""
    return [
        simulate_flight("nano", fam, 15.0, seed, index=i) for i, (fam, seed) in enumerate((("circle", 4), ("star", 5)))
    ]


def test_flown_simulated_flights_give_the_simulators_densities(flown):
    truth = get_preset("nano").imu
    sensors = allan_noise(flown)
    assert sensors["acc"].density == pytest.approx(truth.acc_density, rel=0.1)
    assert sensors["gyro"].density == pytest.approx(truth.gyro_density, rel=0.1)
    # 15 s flights are too short for the gyro's random walk (crossover ~40 s): it is not claimed
    assert not sensors["gyro"].walk_identified
    assert "gyro_random_walk" not in sensors["gyro"].values(("gyro_noise_density", "gyro_random_walk"))
    assert any("K not identified" in line for line in sensors["gyro"].lines(("gyro_random_walk",)))


def test_ideal_imu_matches_exact_truth_and_is_refused():
    """The truth-implied IMU of a simulated flight is the simulator's to within the differencing error; a
    noise-free IMU leaves nothing to fit."""
    ideal = simulate_flight("nano", "circle", 15.0, 4, noise=False)
    acc, gyro = imu_errors(ideal)
    assert np.sqrt(np.mean(acc**2)) < 5e-3 and np.sqrt(np.mean(gyro**2)) < 5e-4
    with pytest.raises(CalibrationRefused, match="noise-free"):
        allan_noise([static_log(60.0, 100.0, 0, noise=None)])


def test_truth_not_exact_at_the_imu_rate_is_refused(flown):
    """Velocity truth with 5 mm/s of white noise, as from motion capture: differentiated, it swamps the IMU's
    white noise at short τ with a steeper slope. Refused, and the reason names the cure."""
    f = flown[0]
    noisy = f.v + np.random.default_rng(2).normal(0.0, 0.005, size=f.v.shape)
    mocap = Flight(f.name, f.t, f.acc, f.gyro, f.rotor, f.rotor_kind, f.p, f.q, noisy, f.metadata)
    with pytest.raises(
        CalibrationRefused, match=r"acc error against ground truth is not white noise.*--imu-noise synthetic"
    ):
        allan_noise([mocap])


def test_a_gap_splits_the_log_and_mixed_rates_or_no_uniform_stretch_are_refused():
    """A dropped stretch of samples splits a log into two uniform parts with the same noise; logs at different
    rates, or without a long enough uniform stretch, are refused."""
    whole = static_log(600.0, 100.0, 0)
    gap = Flight("gap", np.delete(whole.t, range(30_000, 30_050)), *[
        np.delete(x, range(30_000, 30_050), axis=0) for x in (whole.acc, whole.gyro, whole.rotor)
    ], whole.rotor_kind, *[np.delete(x, range(30_000, 30_050), axis=0) for x in (whole.p, whole.q, whole.v)],
        whole.metadata)  # fmt: skip
    np.testing.assert_allclose(allan_noise([gap])["acc"].density, allan_noise([whole])["acc"].density, rtol=0.02)
    with pytest.raises(CalibrationRefused, match="rates differ"):
        allan_noise([static_log(60.0, 100.0, 0), static_log(60.0, 200.0, 1)])
    with pytest.raises(CalibrationRefused, match="uniform rate"):
        allan_noise([static_log(0.3, 100.0, 0)])


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("allan_static")
    write_csv(static_log(180.0, 100.0, seed=7), out / "static.csv")
    return out


def test_cli_writes_the_allan_values(static_dir, tmp_path, capsys):
    """By default the two densities (the random walks printed, not written); with ``--fit`` naming them, all four."""
    out, out4 = tmp_path / "imu.yaml", tmp_path / "imu4.yaml"
    argv = ["calibrate", "--dataset", "csv", "--data", str(static_dir), "--imu-noise", "allan"]
    argv += ["--allow", "rotor_range"]  # a static log: the motors are off
    assert cli_main([*argv, "--out", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "IMU noise by Allan variance against ground truth: 0 filter passes" in printed
    assert "not in --fit, the filter keeps its acc_random_walk" in printed
    cfg = load_filter_config([out])
    assert cfg.acc_noise_density == pytest.approx(NOISE.acc_density, rel=0.05)
    assert cfg.gyro_noise_density == pytest.approx(NOISE.gyro_density, rel=0.05)
    assert "random_walk" not in out.read_text().split("/**/velobins_ekf:")[1]
    assert "Allan variance" in out.read_text()
    measured = allan_noise([static_log(180.0, 100.0, seed=7)])  # the initial bias sigmas too, by default
    assert cfg.init_sigma_acc_bias == pytest.approx(measured["acc"].initial_bias_sigma, rel=1e-3)
    assert cfg.init_sigma_gyro_bias == pytest.approx(measured["gyro"].initial_bias_sigma, rel=1e-3)

    every = "acc_noise_density,gyro_noise_density,acc_random_walk,gyro_random_walk"
    assert cli_main([*argv, "--fit", every, "--out", str(out4)]) == 0, capsys.readouterr().err
    cfg4 = load_filter_config([out4])
    assert cfg4.acc_noise_density == cfg.acc_noise_density
    assert math.isclose(cfg4.acc_random_walk, NOISE.acc_random_walk, rel_tol=0.5)
    assert math.isclose(cfg4.gyro_random_walk, NOISE.gyro_random_walk, rel_tol=0.5)


def test_cli_auto_uses_allan_where_the_truth_allows_and_says_why_it_falls_back(flown, tmp_path, capsys):
    """The default (``auto``) takes the Allan values on exact truth; on velocity truth with motion-capture noise it
    says why not and fits the two densities to ground truth + known noise; ``allan`` there is refused (exit 2)."""
    exact, noisy = tmp_path / "exact", tmp_path / "noisy"
    exact.mkdir(), noisy.mkdir()
    f = flown[0]
    write_csv(f, exact / "f.csv")
    v = f.v + np.random.default_rng(3).normal(0.0, 0.005, size=f.v.shape)
    write_csv(Flight(f.name, f.t, f.acc, f.gyro, f.rotor, f.rotor_kind, f.p, f.q, v, f.metadata), noisy / "f.csv")
    fast = ["--grid-points", "1", "--max-evals", "4"]

    def run(data: Path, out: Path, *extra: str) -> int:
        return cli_main(["calibrate", "--dataset", "csv", "--data", str(data), "--out", str(out), *fast, *extra])

    assert run(exact, tmp_path / "a.yaml") == 0
    assert "IMU noise by Allan variance against ground truth: 0 filter passes" in capsys.readouterr().out
    assert "init_sigma_gyro_bias" in (tmp_path / "a.yaml").read_text()
    assert run(noisy, tmp_path / "b.yaml") == 0
    printed = capsys.readouterr().out
    assert "the Allan variance is not usable on these flights" in printed and "not white" in printed
    # the default's initial bias sigmas are the Allan stage's alone: a likelihood fit leaves them
    assert "the filter keeps its init_sigma_acc_bias, init_sigma_gyro_bias: only the Allan variance" in printed
    assert "IMU noise on ground truth + N(0, 0.05²): fitting acc_noise_density, gyro_noise_density\n" in printed
    written = (tmp_path / "b.yaml").read_text().split("/**/velobins_ekf:")[1]
    assert "random_walk" not in written and "init_sigma" not in written
    assert run(noisy, tmp_path / "b2.yaml", "--fit", "acc_noise_density,init_sigma_gyro_bias") == 0
    printed = capsys.readouterr().out  # named, they are fitted
    assert "IMU noise on ground truth + N(0, 0.05²): fitting acc_noise_density, init_sigma_gyro_bias" in printed
    assert run(noisy, tmp_path / "c.yaml", "--imu-noise", "allan") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not white" in err[0] and not (tmp_path / "c.yaml").exists()
