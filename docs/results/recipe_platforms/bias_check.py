"""Item 13 of README.md: where the heading drift of an rpm run comes from, on one test flight.

Re-runs the EKF offline on the network estimates a run's item-11 evaluation saved
(``<run>/eval_cal_allan/estimates/<flight>/<method>/updates.csv``: ``net_v*`` and ``net_var*``, the variances as
fused, i.e. already times the calibrated s), with those variances times 1 and 4, and prints the filter's final
gyro-bias estimate against the IMU's true bias on that flight (the mean gyro error against the ground truth,
:func:`velobins_eval.calibrate_allan.imu_errors`) and the final heading error. The filter is item 11's
(``rpm_calibrated_imu.yaml``'s densities, every other field the default).

Usage: python bias_check.py STUDY_DIR FLIGHT RUN...   (e.g. runs/recipe28 sim_helix_012 rpm_10min_gh_valfloor_s3)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from axis_scale_probe import FILTER, saved_updates  # this folder: item 11's filter, the saved estimates

from velobins_data.datasets import load_flight
from velobins_ekf.offline import run_offline
from velobins_eval.calibrate_allan import imu_errors
from velobins_eval.evaluate import ground_truth_state
from velobins_eval.metrics import yaw_errors


def main(study: Path, flight: str, runs: list[str]) -> None:
    seq = load_flight("csv", study / "sim" / "rpm_test" / f"{flight}.csv")
    _, gyro_err = imu_errors(seq)
    true_bias = gyro_err.mean(0)
    print(f"{flight}: true gyro bias {np.round(true_bias, 5)} rad/s")
    for run in runs:
        u = saved_updates(study / run / "eval_cal_allan", [flight])[flight]
        z = u[["net_vx", "net_vy", "net_vz"]].to_numpy()
        var = u[["net_var_x", "net_var_y", "net_var_z"]].to_numpy()
        for factor in (1.0, 4.0):
            cov = np.einsum("ni,ij->nij", factor * var, np.eye(3))
            res = run_offline(
                seq.t, seq.acc, seq.gyro, u.t.to_numpy(), z, cov, init_state=ground_truth_state(seq), config=FILTER
            )
            bias = res.final_state.gyro_bias
            yaw = np.degrees(yaw_errors(res.final_state.quat[None], seq.q[-1:])[0])
            print(
                f"  {run}, s x {factor:g}: gyro bias {np.round(bias, 5)}, error {np.round(bias - true_bias, 5)} rad/s;"
                f" final heading error {yaw:+.1f} deg"
            )


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
