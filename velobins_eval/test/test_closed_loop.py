"""velobins_eval.closed_loop: the network in the filter's loop (the Table I baselines), offline.

The filter, the streaming predictor and the loop are the real ones; the network is a stand-in that
knows the vehicle hovers (it measures zero velocity or zero displacement) and records the windows it
is given, so the test can tell whether the loop feeds the filter's attitude in and the estimates back.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from fixtures_datasets import hover_flight

from velobins_common.errors import UserError
from velobins_ekf.config import DISPLACEMENT_HISTORY_MARGIN, EkfConfig
from velobins_eval.closed_loop import closed_loop_flight, filter_config_for, ground_truth_state
from velobins_net.config import ModelConfig
from velobins_net.model import NetOutput

ACC_BIAS = 0.1
"""Accelerometer bias on body x [m/s²]: IMU alone drifts ½·b·t² (1.8 m after 6 s)."""


class HoverOracle:
    """A network that measures what a hovering vehicle has: zero body velocity or zero displacement."""

    def __init__(self, method: str, sigma: float = 0.01):
        self.cfg = ModelConfig(method=method, head="reg", uncertainty="C", rotor_kind="command")
        self.windows: list[np.ndarray] = []
        self.var = sigma**2
        self._p = torch.nn.Parameter(torch.zeros(1))

    def eval(self) -> HoverOracle:
        return self

    def parameters(self):
        return iter([self._p])

    def __call__(self, x: torch.Tensor, uncertainty=None) -> NetOutput:
        self.windows.append(x[0].numpy().astype(np.float64))
        return NetOutput(torch.zeros(1, 3), torch.full((1, 3), self.var), None, None, torch.zeros(1, 3))


def biased_hover(seconds: float = 6.0):
    flight = hover_flight("hover", n=int(seconds * 100), source="hover.csv")
    return dataclasses.replace(flight, acc=flight.acc + np.array([ACC_BIAS, 0.0, 0.0]))


@pytest.mark.parametrize(("method", "kind"), [("tlio", "displacement"), ("airio", "velocity")])
def test_the_loop_feeds_the_filter_attitude_in_and_the_estimates_back(method: str, kind: str) -> None:
    flight = biased_hover()
    net = HoverOracle(method)
    assert net.cfg.output_kind == kind and net.cfg.attitude_input
    rec = closed_loop_flight(net, flight, method)
    # the estimates reached the filter: a biased accelerometer no longer runs away (1.8 m IMU only)
    drift = np.linalg.norm(rec.p_traj - flight.p[0], axis=1)
    assert drift.max() < 0.1, drift.max()
    assert rec.method == method and rec.flight == "hover"
    np.testing.assert_allclose(np.diff(rec.t), 0.05, atol=1e-9)  # one update per network estimate (20 Hz)
    assert rec.t[0] >= flight.t[0] + net.cfg.window_s - 0.011  # the first after one full window
    if kind == "velocity":
        np.testing.assert_array_equal(rec.v_net, np.zeros_like(rec.v_net))
        np.testing.assert_allclose(rec.var_net, net.var)
    else:
        assert np.isnan(rec.v_net).all() and np.isnan(rec.var_net).all()  # a displacement is no velocity
    # the windows carry the filter's attitude (level hover: R ≈ I row-major after the sensor channels)
    last = net.windows[-1]
    np.testing.assert_allclose(last[:, 10:].reshape(-1, 3, 3), np.broadcast_to(np.eye(3), (len(last), 3, 3)), atol=0.02)


def test_a_flight_too_short_for_one_window_is_one_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"hover.csv: the filter applied no update \(network: "):
        closed_loop_flight(HoverOracle("tlio"), biased_hover(seconds=0.5), "tlio")


def test_displacement_models_get_the_history_their_window_needs() -> None:
    tlio, airio = HoverOracle("tlio"), HoverOracle("airio")
    need = tlio.cfg.window_s + DISPLACEMENT_HISTORY_MARGIN
    short = EkfConfig(history_length=0.5)
    assert filter_config_for(tlio, short).history_length == need
    assert filter_config_for(tlio).history_length >= need
    assert filter_config_for(airio, short) is short  # a velocity model keeps the user's filter as given
    longer = EkfConfig(history_length=need + 3.0)
    assert filter_config_for(tlio, longer) is longer


def test_a_displacement_model_refuses_the_velocity_error_model() -> None:
    slow = EkfConfig(velocity_error_sigma=0.5)
    assert filter_config_for(HoverOracle("airio"), slow) is slow
    with pytest.raises(UserError, match="velocity_error_sigma"):
        filter_config_for(HoverOracle("tlio"), slow)


def test_every_evaluation_starts_the_filter_at_the_ground_truth() -> None:
    flight = biased_hover()
    state = ground_truth_state(flight, 5)
    np.testing.assert_allclose(state.pos, flight.p[5])
    np.testing.assert_allclose(state.vel, flight.v[5])
    np.testing.assert_allclose(state.rot, np.eye(3), atol=1e-12)
