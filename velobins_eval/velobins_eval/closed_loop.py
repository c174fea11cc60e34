"""Offline evaluation of the Table I baselines: the network reads the filter it feeds.

TLIO, EqNIO, IMO and AirIO rotate their IMU input with the body attitude (``ModelConfig.attitude_input``).
On a vehicle that attitude is the EKF's own estimate, so network and filter form a loop: the filter
propagates on the IMU, the network's window takes the filter's attitude of every sample, and its
estimate updates the filter. :func:`closed_loop_flight` runs exactly that loop over a recorded
flight: :func:`velobins_ekf.offline.run_offline` feeds the IMU, and after every sample the node's
:class:`~velobins_net.inference.StreamingPredictor` receives the sample, the rotor row and the
filter's attitude, and any estimate goes straight back into the filter as a body velocity
(:meth:`~velobins_ekf.runner.VelocityEkf.add_velocity`) or, for the displacement methods, a
displacement over the window against a clone of its start (:meth:`~velobins_ekf.runner.VelocityEkf.add_displacement`).

The filter starts from ground truth, as in :func:`velobins_eval.evaluate.fuse_flight`; the network
never sees the ground-truth attitude at evaluation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from velobins_common.errors import UserError
from velobins_data.flight import Flight

from .scoring import FlightRecord


def ground_truth_state(seq: Flight, index: int = 0):
    """EKF NavState of the ground truth at row ``index`` (every evaluation starts the filter there)."""
    from velobins_ekf.ekf import NavState

    return NavState.from_pose(seq.q[index], seq.v[index], seq.p[index])


def record_of_run(seq: Flight, method: str, ups: list, res, v_net: np.ndarray, var_net: np.ndarray) -> FlightRecord:
    """:class:`FlightRecord` of a filter run: its accepted update records ``ups`` (velocity or displacement
    updates: stamp, pos, rot, vel_world, vel_world_cov) and its full-rate result ``res`` (t, pos, rot, vel),
    with the network's body velocity and variance at the update stamps."""
    from scipy.spatial.transform import Rotation

    return FlightRecord(
        flight=seq.name,
        method=method,
        t=np.array([u.stamp for u in ups]),
        v_net=v_net,
        var_net=var_net,
        p_fused=np.array([u.pos for u in ups]),
        v_fused=np.array([u.vel_world for u in ups]),
        cov_fused=np.array([u.vel_world_cov for u in ups]),
        t_traj=res.t,
        p_traj=res.pos,
        q_fused=Rotation.from_matrix(np.array([u.rot for u in ups])).as_quat(),
        q_traj=Rotation.from_matrix(res.rot).as_quat(),
        v_traj=res.vel,
    )


def filter_config_for(model, ekf_config=None):
    """``ekf_config`` (defaults when None) with enough history for the model's displacement windows.

    Raises UserError for a displacement model with ``velocity_error_sigma`` > 0 (a velocity-measurement model)."""
    from velobins_ekf.config import DISPLACEMENT_HISTORY_MARGIN, EkfConfig

    cfg = ekf_config or EkfConfig()
    if model.cfg.output_kind == "displacement" and cfg.velocity_error_sigma > 0:
        raise UserError(
            "filter.velocity_error_sigma > 0 models the errors of velocity measurements; a displacement method "
            "needs it 0 (set it in --params)"
        )
    need = model.cfg.window_s + DISPLACEMENT_HISTORY_MARGIN
    if model.cfg.output_kind == "displacement" and cfg.history_length < need:
        cfg = dataclasses.replace(cfg, history_length=need)
    return cfg


def closed_loop_flight(model, seq: Flight, method: str, predictor_config=None, ekf_config=None) -> FlightRecord:
    """EKF-fused record of a flight with the network in the loop (module docstring).

    The record's ``t`` are the stamps of the accepted updates; ``v_net``/``var_net`` are the network's
    body velocity and variance there (NaN for displacement methods, which give none).
    """
    from velobins_ekf.offline import run_offline
    from velobins_net.inference import PredictorConfig, StreamingPredictor

    predictor = StreamingPredictor(model, predictor_config or PredictorConfig())
    displacement = model.cfg.output_kind == "displacement"
    net: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    acc, gyro, rotor, stamps = seq.acc, seq.gyro, seq.rotor, seq.t

    def on_imu(i: int, filt) -> None:
        t = float(stamps[i])
        predictor.push_rotor(t, rotor[i])
        predictor.push_imu(t, acc[i], gyro[i])
        if predictor.needs_attitude:
            predictor.push_attitude(t, filt.quaternion)
        pred = predictor.step()
        if pred is None:
            return
        if displacement:
            filt.add_displacement(pred.t_start, pred.stamp, pred.displacement, pred.covariance_matrix())
        else:
            filt.add_velocity(pred.stamp, pred.velocity, pred.covariance_matrix())
            net[pred.stamp] = (pred.velocity, pred.variance)

    none = np.zeros((0, 3))
    res = run_offline(
        seq.t,
        seq.acc,
        seq.gyro,
        none[:, 0],
        none,
        np.zeros((0, 3, 3)),
        init_state=ground_truth_state(seq),
        config=filter_config_for(model, ekf_config),
        on_imu=on_imu,
    )
    ups = [u for u in (res.displacement_updates if displacement else res.updates) if u.accepted]
    if not ups:
        raise UserError(
            f"{seq.source}: the filter applied no update (network: {dict(predictor.counts)}; filter: {res.stats})"
        )
    t_upd = np.array([u.stamp for u in ups])
    nan3 = np.full((t_upd.size, 3), np.nan)
    v_net = np.array([net[t][0] for t in t_upd]) if not displacement else nan3
    var_net = np.array([net[t][1] for t in t_upd]) if not displacement else nan3
    return record_of_run(seq, method, ups, res, v_net, var_net)
