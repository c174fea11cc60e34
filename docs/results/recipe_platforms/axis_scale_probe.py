"""Item 13 of README.md: would a variance scale per axis (horizontal, vertical) fix the rpm heading drift?

Re-runs the EKF offline on the network estimates a run's evaluations saved (``updates.csv``: ``net_v*`` and
``net_var*``, the variances already times the run's calibrated s), with the variances times a horizontal factor
(x, y) and a vertical one (z), and scores the fused velocity: AVE, posterior NLL (``calibrate``'s objective) and
NEES share in the 95 % bounds. The filter is item 11's (``rpm_calibrated_imu.yaml``'s densities).

* ``--oracle``: a grid of factors scored on the test flights themselves (``eval_cal_allan``): what the best
  per-axis scale could give, not a recipe.
* default: the factors picked the way ``calibrate`` picks s, by the posterior NLL on the run's held-out flight
  (``eval_heldout_allan``: ``velobins evaluate`` on ``<run>/heldout`` with ``overlay_allan.yaml``), then scored on
  the test flights.

Usage: python axis_scale_probe.py STUDY_DIR [--oracle] RUN...
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from velobins_common.errors import UserError
from velobins_common.stats import gaussian_nll_samples, nees
from velobins_data.datasets import load_flights
from velobins_data.flight import Flight
from velobins_ekf.offline import run_offline
from velobins_eval.evaluate import ground_truth_state, load_ekf_config
from velobins_eval.metrics import ave, nees_summary
from velobins_eval.scoring import GroundTruth

FILTER = load_ekf_config([Path(__file__).resolve().parent / "rpm_calibrated_imu.yaml"])
"""Item 11's filter: rpm_calibrated_imu.yaml over the defaults."""
ORACLE_GRID = list(itertools.product((1.0, 2.0, 4.0), (0.5, 1.0, 2.0)))
FIT_GRID = list(itertools.product([2.0**k for k in range(-2, 5)], [2.0**k for k in range(-3, 3)]))


def saved_updates(evaluation: Path, flights: Iterable[str]) -> dict[str, pd.DataFrame]:
    """Each flight's updates.csv of an evaluation folder (one method per evaluation); exits 2 with one line
    naming the missing file when an evaluation has not run (or not on these flights)."""
    saved = {}
    for name in flights:
        found = sorted((evaluation / "estimates" / name).glob("*/updates.csv"))
        if not found:
            sys.exit(_fail(f"no {evaluation / 'estimates' / name}/*/updates.csv (run velobins evaluate first)"))
        saved[name] = pd.read_csv(found[0])
    return saved


VAR_COLUMNS = ["net_var_x", "net_var_y", "net_var_z"]
"""The saved network variances in ``updates.csv`` (already times the run's s)."""
ESTIMATE_COLUMNS = ["net_vx", "net_vy", "net_vz"]
"""The saved network estimates in ``updates.csv`` (body frame, m/s)."""


def replay_mean(
    flights: dict[str, Flight],
    saved: dict[str, pd.DataFrame],
    variances: Callable[[pd.DataFrame], np.ndarray],
    config=FILTER,
) -> tuple[float, float, float]:
    """(fused AVE, posterior NLL, NEES share in bounds), means over flights, each flight replayed by
    :func:`replay_flight` with ``variances(its saved updates)`` (N, 3) in place of its saved variances (a map
    may read the estimates too, not only ``VAR_COLUMNS``)."""
    figures = [replay_flight(seq, saved[name], variances(saved[name]), config) for name, seq in flights.items()]
    return tuple(float(x) for x in np.mean(figures, axis=0))


def score(flights: dict[str, Flight], saved: dict[str, pd.DataFrame], scales: np.ndarray, config=FILTER):
    """(fused AVE, posterior NLL, NEES share in bounds), means over flights, with the saved variances multiplied
    per body axis by ``scales`` (3,), fused by the filter ``config``."""
    return replay_mean(flights, saved, lambda u: u[VAR_COLUMNS].to_numpy() * np.asarray(scales), config)


def replay_flight(seq: Flight, u: pd.DataFrame, var: np.ndarray, config=FILTER) -> tuple[float, float, float]:
    """(fused AVE, posterior NLL, NEES share in bounds) of one flight fused offline by the filter ``config`` from
    its saved estimates ``u`` (``updates.csv``) with the network variances ``var`` (N, 3) in place of the saved."""
    res = run_offline(
        seq.t,
        seq.acc,
        seq.gyro,
        u.t.to_numpy(),
        u[ESTIMATE_COLUMNS].to_numpy(),
        np.einsum("ni,ij->nij", var, np.eye(3)),
        init_state=ground_truth_state(seq),
        config=config,
    )
    ups = [x for x in res.updates if x.accepted]
    stamps = np.array([x.stamp for x in ups])
    return fused_figures(seq, stamps, np.array([x.vel_world for x in ups]), np.array([x.vel_world_cov for x in ups]))


def fused_figures(seq: Flight, stamps: np.ndarray, vel: np.ndarray, cov: np.ndarray) -> tuple[float, float, float]:
    """Fused AVE, mean posterior NLL and NEES share in the 95 % bounds of one flight's fused world velocities
    ``vel`` (M, 3) with covariances ``cov`` (M, 3, 3) at ``stamps``, by ``velobins evaluate``'s own functions."""
    truth = GroundTruth.of(seq).at(stamps).v
    err = vel - truth
    return ave(vel, truth), float(gaussian_nll_samples(err, cov).mean()), nees_summary(nees(err, cov)).in_bounds


def flights_in(folder: Path, kind: str = "csv") -> dict[str, Flight]:
    """The ``kind`` flights of a folder (``velobins_data``'s loader and checks), by flight name."""
    try:
        return {f.name: f for f in load_flights(kind, folder, progress=False).sequences}
    except (UserError, ValueError, OSError) as exc:
        sys.exit(_fail(str(exc)))


def _fail(message: str) -> int:
    """Print one line on standard error and give the exit status 2 of a user's mistake."""
    print(f"{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    return 2


def main(study: Path, oracle: bool, runs: list[str]) -> None:
    test = flights_in(study / "sim" / "rpm_test")
    for run in runs:
        saved = saved_updates(study / run / "eval_cal_allan", test)
        if oracle:
            for h, v in ORACLE_GRID:
                ave, nll, inside = score(test, saved, np.array([h, h, v]))
                print(f"{run} xy x{h:g} z x{v:g}: fused AVE {ave:.3f}, posterior NLL {nll:.3f}, in bounds {inside:.1%}")
            continue
        held = flights_in(study / run / "heldout")
        held_saved = saved_updates(study / run / "eval_heldout_allan", held)
        h, v = min(FIT_GRID, key=lambda a: score(held, held_saved, np.array([a[0], a[0], a[1]]))[1])
        before, after = score(test, saved, np.ones(3)), score(test, saved, np.array([h, h, v]))
        print(
            f"{run}: fitted xy x{h:g} z x{v:g} on {', '.join(held)}; test fused AVE {before[0]:.3f} -> {after[0]:.3f},"
            f" posterior NLL {before[1]:.3f} -> {after[1]:.3f}, in bounds {before[2]:.1%} -> {after[2]:.1%}"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    oracle = "--oracle" in args
    rest = [a for a in args if a != "--oracle"]
    main(Path(rest[0]), oracle, rest[1:])
