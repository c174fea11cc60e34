"""The 20 Hz update schedule on IMU time (:func:`next_update_slot`) on jittered and gappy stamps.

The old limiter (``t - last_run < period - 1e-6``) fired at 17.4–19.7 Hz on real NanoBench
flights: with µs jitter on 100 Hz stamps, half the updates slipped to the 6th sample. The schedule
keeps a grid of IMU time instead, so the rate is the update rate whatever the jitter.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from velobins_net.config import ModelConfig
from velobins_net.inference import PredictorConfig, StreamingPredictor, next_update_slot
from velobins_net.model import VeloBinsNet

torch.set_num_threads(1)

PERIOD = 1.0 / 20.0


def _fired(stamps: np.ndarray, period: float = PERIOD) -> np.ndarray:
    """Stamps at which the schedule fires (every window available), as the predictor runs it."""
    slot, out = None, []
    for i, t in enumerate(stamps):
        dt = t - stamps[i - 1] if i else 0.0
        new = next_update_slot(slot, float(t), float(dt), period)
        if new is not None:
            slot = new
            out.append(t)
    return np.asarray(out)


def _jittered(rate: float, jitter: float, duration: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.arange(int(duration * rate)) / rate + rng.uniform(-jitter, jitter, int(duration * rate))


def _nanobench_like(duration: float = 60.0, seed: int = 1) -> np.ndarray:
    """Real-like NanoBench stamps: epoch seconds (float64 resolution 0.24 µs), µs jitter, dropped samples."""
    rng = np.random.default_rng(seed)
    n = int(duration * 100)
    t = 1.7726844e9 + np.arange(n) * 0.01 + rng.integers(-7, 8, n) * 2.38e-7
    keep = np.ones(n, bool)
    keep[rng.choice(n, n // 300, replace=False)] = False  # a sample lost now and then (20 ms gaps)
    return t[keep]


def _rate(fired: np.ndarray) -> float:
    return (len(fired) - 1) / (fired[-1] - fired[0])


@pytest.mark.parametrize(
    "stamps",
    [
        _jittered(100.0, 0.002, 60.0),  # 100 Hz ± 2 ms
        _jittered(1000.0, 0.0002, 30.0),  # 1 kHz ± 0.2 ms
        _jittered(400.0, 0.0, 30.0),  # exact
        _nanobench_like(),
    ],
    ids=["100Hz+-2ms", "1kHz+-0.2ms", "400Hz", "nanobench-like"],
)
def test_rate_stays_on_the_grid(stamps):
    fired = _fired(np.sort(stamps))
    assert _rate(fired) == pytest.approx(20.0, rel=0.01)
    gaps = np.diff(fired)
    assert gaps.min() > 0.5 * PERIOD  # never two updates for one slot
    # every update within about a sample (± jitter) of its grid slot
    slots = fired[0] + np.round((fired - fired[0]) / PERIOD) * PERIOD
    assert np.max(np.abs(fired - slots)) < 0.0125


def test_old_rule_loses_updates_on_real_like_stamps():
    """The pattern above is the one that broke the old limiter (guards the test's realism)."""
    stamps, last, fired = _nanobench_like(), None, 0
    for t in stamps:
        if last is None or t - last >= PERIOD - 1e-6:
            last, fired = t, fired + 1
    assert fired / (stamps[-1] - stamps[0]) < 19.5


def test_gap_reanchors_and_late_windows_do_not_double():
    stamps = np.r_[np.arange(0, 2.0, 0.01), np.arange(2.337, 4.0, 0.01)]  # a 0.34 s gap
    fired = _fired(stamps)
    assert np.diff(fired).min() > 0.5 * PERIOD
    after = fired[fired > 2.3]
    assert after[0] == pytest.approx(2.337)  # first sample after the gap
    np.testing.assert_allclose(np.diff(after), PERIOD, atol=1e-9)  # grid re-anchored there
    # not due before its slot minus half a sample; the first update anchors the grid
    assert next_update_slot(None, 5.0, 0.01, PERIOD) == 5.0
    assert next_update_slot(5.0, 5.044, 0.01, PERIOD) is None
    assert next_update_slot(5.0, 5.046, 0.01, PERIOD) == pytest.approx(5.05)
    assert next_update_slot(5.0, 5.2, 0.01, PERIOD) == 5.2  # late by > half a period: re-anchored


def test_predictor_keeps_20hz_on_jittered_stamps():
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=16)).eval()
    pred = StreamingPredictor(model, PredictorConfig())
    stamps = np.sort(_jittered(100.0, 0.002, 6.0, seed=3))
    out = []
    for t in stamps:
        pred.push_rotor(t, [0.5] * 4)
        pred.push_imu(t, [0.0, 0.0, 9.8], [0.0, 0.0, 0.0])
        p = pred.step()
        if p is not None:
            out.append(p.stamp)
    assert pred.counts["ok"] == len(out)
    assert _rate(np.asarray(out)) == pytest.approx(20.0, rel=0.01)
    assert np.diff(out).min() > 0.5 * PERIOD
    np.testing.assert_array_equal(out, _fired(stamps[stamps >= out[0]]))  # the predictor runs this schedule
