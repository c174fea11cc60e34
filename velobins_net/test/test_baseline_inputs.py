"""What the Table I baselines are fed: ground-truth attitude and displacement targets in training,
the filter's attitude on a stream (slerp between estimates, carried forward with the gyro)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from synthetic import make_flight

from velobins_net.attitude import attitude_window
from velobins_net.config import ModelConfig
from velobins_net.data import WindowDataset, flight_arrays
from velobins_net.inference import PredictorConfig, StreamingPredictor
from velobins_net.variants import parse_variant

OMEGA = np.array([0.3, -0.2, 0.9])
"""Constant body rate [rad/s] of the tumbling flight below: R(t) = R0 Exp(ω t) exactly."""
R0 = Rotation.from_euler("zyx", [40.0, 10.0, -5.0], degrees=True)


def _truth(t: np.ndarray) -> Rotation:
    return R0 * Rotation.from_rotvec(np.outer(t, OMEGA))


def _baseline_cfg(method: str, **kw) -> ModelConfig:
    return ModelConfig(method=method, head="reg", uncertainty="C", rotor_kind="command", **kw)


def test_attitude_window_slerps_between_estimates_and_carries_the_newest_forward_with_the_gyro():
    grid = 5.0 + np.arange(100) / 100.0
    t_att = np.arange(4.8, 5.93, 0.02)  # 50 Hz estimates, the newest 60 ms before the window end
    q_att = _truth(t_att).as_quat()
    rot = attitude_window(grid, t_att, q_att, np.tile(OMEGA, (100, 1)), max_age=0.1)
    assert rot is not None and rot.shape == (100, 9)
    err = (Rotation.from_matrix(rot.reshape(-1, 3, 3)).inv() * _truth(grid)).magnitude()
    assert err.max() < 2e-4  # slerp of a constant-rate rotation and exact gyro integration
    inside = grid <= t_att[-1]
    assert inside.any() and (~inside).any()  # both branches were exercised


def test_attitude_window_refuses_stale_or_late_estimates():
    grid = 5.0 + np.arange(100) / 100.0
    gyro = np.zeros((100, 3))
    t_att = np.arange(4.8, 5.9, 0.02)
    q = _truth(t_att).as_quat()
    assert attitude_window(grid, t_att[:-10], q[:-10], gyro, max_age=0.1) is None  # newest too old
    late = t_att > 5.001
    assert attitude_window(grid, t_att[late], q[late], gyro, max_age=0.1) is None  # does not reach the start
    assert attitude_window(grid, t_att[:0], q[:0], gyro, max_age=0.1) is None


def _tumbling_flight():
    flight = make_flight(3, duration=6.0)
    rot = _truth(flight.t)
    v = rot.apply(flight.v)  # world velocity of the same body velocity
    return dataclasses.replace(flight, q=rot.as_quat(), v=v, p=np.cumsum(v, axis=0) / 100.0)


def test_training_windows_carry_attitude_and_yaw_frame_displacements():
    flight = _tumbling_flight()
    cfg = _baseline_cfg("tlio")
    x, y = flight_arrays(flight, cfg)
    assert x.shape == (len(flight.t), cfg.input_channels) and cfg.input_channels == 6 + 4 + 9
    np.testing.assert_allclose(x[:, 10:].reshape(-1, 3, 3), _truth(flight.t).as_matrix(), atol=1e-12)
    w = cfg.window_len
    for e in (w - 1, 250, len(flight.t) - 1):  # independent computation: yaw of R at the window start
        s = e - w + 1
        r_s = _truth(flight.t[s : s + 1]).as_matrix()[0]
        psi = np.arctan2(r_s[1, 0], r_s[0, 0])
        expected = Rotation.from_euler("z", psi).inv().apply(flight.p[e] - flight.p[s])
        np.testing.assert_allclose(y[e], expected, atol=1e-9)
    ds = WindowDataset([flight], cfg, stride=10)
    xb, yb = ds.gather(ds.ends.new_tensor([0, 5]))
    assert xb.shape == (2, w, 19) and yb.shape == (2, 3)


def test_airio_target_is_body_velocity_with_attitude_inputs():
    flight = _tumbling_flight()
    x, y = flight_arrays(flight, _baseline_cfg("airio"))
    assert x.shape[1] == 19
    np.testing.assert_allclose(y, _truth(flight.t).inv().apply(flight.v), atol=1e-9)


def test_displacement_targets_ignore_a_world_yaw():
    flight = _tumbling_flight()
    _, y = flight_arrays(flight, _baseline_cfg("imo"))
    turn = Rotation.from_euler("z", 123.0, degrees=True)
    turned = dataclasses.replace(flight, q=(turn * Rotation.from_quat(flight.q)).as_quat(), p=turn.apply(flight.p))
    _, y_turned = flight_arrays(turned, _baseline_cfg("imo"))
    np.testing.assert_allclose(y_turned, y, atol=1e-9)


def test_method_names_parse_to_their_network():
    for name in ("tlio", "eqnio", "imo", "airio"):
        v = parse_variant(name.upper())
        assert (v.name, v.method, v.is_baseline, v.is_regression) == (name, name, True, False)
    assert parse_variant("ai-io").name == "reg" and parse_variant("ai-io").method == "velobins"
    with pytest.raises(ValueError, match="baseline"):
        parse_variant("ronin")
    with pytest.raises(ValueError, match="method"):
        ModelConfig(method="tlio")  # a baseline has its own covariance head: head='reg', uncertainty 'C'


class _Echo:
    """A stand-in 'network' that returns the window it was given (to see what the predictor builds)."""

    def __init__(self, cfg: ModelConfig):
        import torch

        self.cfg = cfg
        self.seen: list[np.ndarray] = []
        self._p = torch.nn.Parameter(torch.zeros(1))
        self.cov = True

    def eval(self):
        return self

    def parameters(self):
        return iter([self._p])

    def __call__(self, x, uncertainty=None):
        import torch

        from velobins_net.model import NetOutput

        self.seen.append(x[0].numpy().astype(np.float64))
        v = torch.zeros(1, 3)
        return NetOutput(v, torch.ones(1, 3), None, None, torch.zeros(1, 3))


def test_streaming_predictor_needs_the_filter_attitude_and_reports_the_window_start():
    cfg = _baseline_cfg("tlio")
    model = _Echo(cfg)
    pred = StreamingPredictor(model, PredictorConfig())  # type: ignore[arg-type]
    t = np.arange(0, 1.5, 0.01)
    truth = _truth(t)
    outs = []
    for i, ti in enumerate(t):
        pred.push_rotor(ti, np.full(4, 0.5))
        pred.push_imu(ti, np.array([0.0, 0.0, 9.81]), OMEGA)
        if ti >= 0.3:  # the filter's attitude arrives late: no estimate before it covers a window
            pred.push_attitude(ti, truth[i].as_quat())
        out = pred.step()
        if out is not None:
            outs.append(out)
    assert pred.counts["no_attitude"] > 0 and outs
    first = outs[0]
    assert first.kind == "displacement" and first.t_start == pytest.approx(first.stamp - 0.99)
    assert first.displacement is first.measurement  # a displacement is named as one, never as a velocity
    with pytest.raises(ValueError, match="measures displacement, not velocity"):
        _ = first.velocity
    assert first.t_start >= 0.3 - 1e-9  # the estimates must reach back to the window start
    win = model.seen[0]
    grid = first.stamp + (np.arange(100) - 99) / 100.0
    err = (Rotation.from_matrix(win[:, 10:].reshape(-1, 3, 3)).inv() * _truth(grid)).magnitude()
    assert err.max() < 1e-3
