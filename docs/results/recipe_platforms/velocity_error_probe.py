"""Item 17 of README.md: would a filter that models the network's errors as correlated in time fix the heading?

The product's filter takes each network estimate as ``z = Rᵀv + n`` with white ``n`` of the network's variance times
``calibrate``'s s, and s grows far above 1 (43 and 99.5 in item 17) to stand in for errors that last 0.5–1 s. This
probe re-runs the filter on the estimates a run's evaluations saved (``updates.csv``: ``net_v*``, ``net_var*`` as
fused, i.e. already times s) with a first-order Gauss-Markov error on the measured body velocity appended to the
state (18-D instead of 15-D)::

    z = Rᵀv + b + n,   n ~ N(0, share · net_var),   b_{k+1} = φ b_k + w,   φ = exp(−dt/τ),   var(w) = σ_b² (1 − φ²)

The 15-D part is the product's (``nominal_step``, ``Transition``, ``kalman_innovation``, ``updated_covariance``,
``inject``); an update is applied at the first IMU stamp at or after its own (the product interpolates to it), so
``share = 1, σ_b = 0`` is the product's filter to within that timing. The filter densities are item 11's
(``rpm_calibrated_imu.yaml``, or ``nano_calibrated_imu.yaml`` for ``nano``).

For each run it prints, scored on the test flights (fused AVE, posterior NLL, NEES share in the 95 % bounds, final
heading error per flight): the white filter with the run's calibrated s; the white filter with s times the factor
of 2^-3 … 2^3, and the Gauss-Markov filter of ``GRID``, that give the lowest posterior NLL on the fitting flights
(the way ``calibrate`` picks s); and the model of ``GRID`` with the lowest posterior NLL on the test flights
themselves (what the model could give, not a recipe). The fitting flights are either

* ``heldout``: the run's held-out flight (``eval_heldout``: ``velobins evaluate`` on ``<run>/heldout`` with the
  run's overlay), what the bench calibrates s on; or
* ``calset``: flights of every style that neither training nor test saw (``STUDY_DIR/sim/<platform>_cal``, made
  by ``velobins simulate --preset <platform> --flights 9 --seconds 60 --seed 29``; ``eval_calset``: ``velobins
  evaluate`` on them with the run's overlay).

Item 19 built this model into the product (``filter.velocity_error_sigma`` and ``velocity_error_tau``,
``velobins_ekf.velocity_error``, fitted by ``velobins calibrate``); the loop below stays as the record of item 17's
figures (it applies each update at the next IMU stamp, the product at the update's own).

Usage: python velocity_error_probe.py STUDY_DIR PLATFORM {heldout,calset} [--white-only] RUN...
(PLATFORM: rpm or nano; --white-only: the white filters only)
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from axis_scale_probe import flights_in, fused_figures, saved_updates  # this folder: loading and scoring

from velobins_data.flight import Flight
from velobins_ekf.config import EkfConfig
from velobins_ekf.nominal import nominal_step, rotation_series
from velobins_ekf.propagation import Interval, Transition
from velobins_ekf.so3 import skew
from velobins_ekf.state import DIM, VEL, initial_covariance
from velobins_ekf.update import inject, kalman_innovation, updated_covariance
from velobins_eval.evaluate import ground_truth_state, load_ekf_config
from velobins_eval.metrics import yaw_errors

HERE = Path(__file__).resolve().parent
GM = slice(DIM, DIM + 3)
"""Error-state block of the Gauss-Markov velocity-measurement error b [m/s], body frame."""
GRID = list(itertools.product((0.3, 0.6, 1.0, 1.5, 2.5), (0.25, 0.5, 1.0, 3.0), (0.03, 0.1, 0.3, 1.0)))
"""(σ_b [m/s], τ [s], share of the saved variance kept as white noise) tried on the fitting flights."""


class Model(NamedTuple):
    sigma_b: float
    tau: float
    share: float

    def __str__(self) -> str:
        if self.sigma_b == 0.0:
            return "white, s as calibrated" + (f" x {self.share:g}" if self.share != 1.0 else "")
        return f"Gauss-Markov sigma_b {self.sigma_b:g} m/s, tau {self.tau:g} s, white share {self.share:g}"


WHITE = Model(0.0, 1.0, 1.0)


class Figures(NamedTuple):
    ave: float
    nll: float
    inside: float
    yaw: tuple[float, ...]


def filter_flight(seq: Flight, u: pd.DataFrame, model: Model, config: EkfConfig):
    """Stamps, fused world velocities and their covariances, and the final attitude quaternion, of one flight."""
    st = ground_truth_state(seq)
    n = DIM + 3
    p = np.zeros((n, n))
    p[:DIM, :DIM] = initial_covariance(config, st.rot)
    p[GM, GM] = np.eye(3) * max(model.sigma_b, 1e-9) ** 2
    trans, f, q = Transition(), np.eye(n), np.zeros((n, n))
    h = np.zeros((3, n))
    h[:, GM] = np.eye(3)
    tm = u.t.to_numpy()
    zs = u[["net_vx", "net_vy", "net_vz"]].to_numpy()
    rs = u[["net_var_x", "net_var_y", "net_var_z"]].to_numpy() * model.share
    b = np.zeros(3)
    j = int(np.searchsorted(tm, seq.t[0], side="right"))
    out_t, out_v, out_c = [], [], []
    for i in range(seq.t.size - 1):
        dt = float(seq.t[i + 1] - seq.t[i])
        acc = 0.5 * (seq.acc[i] + seq.acc[i + 1]) - st.acc_bias
        series = rotation_series(dt, 0.5 * (seq.gyro[i] + seq.gyro[i + 1]), st.gyro_bias)
        step = nominal_step(st.rot, st.vel, st.pos, acc, series, dt, config.gravity)
        f[:DIM, :DIM], q[:DIM, :DIM] = trans.build(Interval(dt, step.r_mid, acc, series), config)
        st.rot, st.vel, st.pos = step.rot, step.vel, step.pos
        phi = np.exp(-dt / model.tau)
        b = b * phi
        f[GM, GM] = np.eye(3) * phi
        q[GM, GM] = np.eye(3) * model.sigma_b**2 * (1.0 - phi * phi)
        p = f @ p @ f.T + q
        while j < tm.size and tm[j] <= seq.t[i + 1]:
            r = np.diag(rs[j])
            v_body = st.rot.T @ st.vel
            h[:, 0:3] = skew(v_body)
            h[:, VEL] = st.rot.T
            y = zs[j] - v_body - b
            pht = p @ h.T
            inn = kalman_innovation(y, pht, h @ pht, r, h)
            dx = inn.gain @ y
            p = updated_covariance(p, inn, r)
            inject(st, dx[:DIM], p)
            b = b + dx[GM]
            p = 0.5 * (p + p.T)
            out_t.append(tm[j])
            out_v.append(st.vel.copy())
            out_c.append(p[VEL, VEL].copy())
            j += 1
    return np.array(out_t), np.array(out_v), np.array(out_c), st.quat


def score(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], model: Model, config: EkfConfig) -> Figures:
    """Means over flights of fused AVE, posterior NLL and NEES share in bounds; the final heading errors [deg]."""
    rows, yaws = [], []
    for name, seq in flights.items():
        stamps, vel, cov, quat = filter_flight(seq, saved[name], model, config)
        rows.append(fused_figures(seq, stamps, vel, cov))
        yaws.append(float(np.degrees(yaw_errors(quat[None], seq.q[-1:])[0])))
    ave, nll, inside = (float(x) for x in np.mean(rows, axis=0))
    return Figures(ave, nll, inside, tuple(yaws))


def fit(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], models: list[Model], config: EkfConfig) -> Model:
    """The model of ``models`` with the lowest posterior NLL on ``flights``."""
    return min(models, key=lambda m: score(flights, saved, m, config).nll)


def show(label: str, fig: Figures) -> str:
    yaws = " ".join(f"{y:+.0f}" for y in fig.yaw)
    figures = f"fused AVE {fig.ave:.3f}, posterior NLL {fig.nll:.3f}, in bounds {fig.inside:.1%}"
    return f"{label}: {figures}, yaw [{yaws}] deg"


def main(study: Path, platform: str, fit_on: str, runs: list[str], white_only: bool = False) -> None:
    config = load_ekf_config([HERE / f"{platform}_calibrated_imu.yaml"])
    test = flights_in(study / "sim" / f"{platform}_test")
    for run in runs:
        saved = saved_updates(study / run / "eval_cal", test)
        if fit_on == "heldout":
            fit_flights = flights_in(study / run / "heldout")
            fit_saved = saved_updates(study / run / "eval_heldout", fit_flights)
        else:
            fit_flights = flights_in(study / "sim" / f"{platform}_cal")
            fit_saved = saved_updates(study / run / "eval_calset", fit_flights)

        white = fit(fit_flights, fit_saved, [Model(0.0, 1.0, 2.0**k) for k in range(-3, 4)], config)
        print(f"{run} (fitted on {', '.join(fit_flights)})", flush=True)
        print("  " + show(str(WHITE), score(test, saved, WHITE, config)), flush=True)
        print("  " + show(f"fitted: {white}", score(test, saved, white, config)), flush=True)
        if white_only:
            continue
        models = [Model(*m) for m in GRID]
        gauss_markov = fit(fit_flights, fit_saved, models, config)
        print("  " + show(f"fitted: {gauss_markov}", score(test, saved, gauss_markov, config)), flush=True)
        oracle = min(((m, score(test, saved, m, config)) for m in models), key=lambda x: x[1].nll)
        print("  " + show(f"best on test: {oracle[0]}", oracle[1]), flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--white-only"]
    if len(args) < 4 or args[2] not in ("heldout", "calset"):
        sys.exit(__doc__)
    main(Path(args[0]), args[1], args[2], args[3:], white_only="--white-only" in sys.argv)
