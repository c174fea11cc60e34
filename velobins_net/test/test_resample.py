"""Anti-alias filtering before decimation to the model rate (velobins_net.resample).

One resampling for training (:func:`velobins_net.data.resample`) and the streaming predictor:
a tone above the model's Nyquist is attenuated, an in-band tone passes with the documented delay,
100 Hz input (NanoBench) is untouched, and the streaming window equals the training window.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic import make_flight

from velobins_common.interp import interp_columns
from velobins_net.config import ModelConfig
from velobins_net.data import WindowDataset, resample
from velobins_net.inference import PredictorConfig, StreamingPredictor
from velobins_net.model import VeloBinsNet
from velobins_net.resample import ANTIALIAS_SPAN_S, antialias, antialias_taps, to_model_grid

torch.set_num_threads(1)

MODEL_RATE = 100.0


def _tone_out(freq: float, rate_in: float, filtered: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A unit tone sampled at ``rate_in`` decimated to 100 Hz: (grid, output) after the first 0.5 s."""
    t = np.arange(int(4.0 * rate_in)) / rate_in
    x = np.sin(2 * np.pi * freq * t)[:, None]
    grid, y = resample(t, x, MODEL_RATE, antialias=filtered)
    keep = grid >= 0.5
    return grid[keep], y[keep, 0]


def _amplitude(y: np.ndarray) -> float:
    return float(np.sqrt(2.0) * np.std(y))


@pytest.mark.parametrize("rate_in", [400.0, 500.0, 1000.0])
def test_tone_above_nyquist_is_attenuated(rate_in):
    _, raw = _tone_out(80.0, rate_in, filtered=False)
    assert _amplitude(raw) > 0.5  # without the filter 80 Hz folds onto 20 Hz at full strength
    _, y = _tone_out(80.0, rate_in)
    assert 20 * np.log10(_amplitude(y)) <= -20.0


@pytest.mark.parametrize("rate_in", [400.0, 500.0, 1000.0])
def test_in_band_tone_passes_with_the_documented_delay(rate_in):
    grid, y = _tone_out(5.0, rate_in)
    assert abs(20 * np.log10(_amplitude(y))) <= 1.0
    delay = (len(antialias_taps(rate_in, MODEL_RATE)) - 1) / (2 * rate_in)
    assert delay == pytest.approx(ANTIALIAS_SPAN_S / 2, abs=0.5 / rate_in + 1e-12)
    # a linear-phase FIR: the output is the input delayed by (L - 1) / (2 f_in)
    np.testing.assert_allclose(y, np.sin(2 * np.pi * 5.0 * (grid - delay)), atol=0.01)


def test_model_rate_input_is_unchanged():
    """NanoBench (100 Hz, µs jitter, dropped samples): no filter, plain interpolation bit for bit."""
    rng = np.random.default_rng(0)
    t = 1.7726844e9 + np.arange(3000) * 0.01 + rng.integers(-7, 8, 3000) * 2.38e-7
    t = np.delete(t, [500, 1700])  # 20 ms gaps: the flight is resampled, not used as is
    x = rng.standard_normal((len(t), 10))
    assert antialias_taps(100.0, MODEL_RATE) is None and antialias_taps(104.0, MODEL_RATE) is None
    assert antialias(t, x, MODEL_RATE) is x
    grid, y = resample(t, x, MODEL_RATE)
    np.testing.assert_array_equal(y, interp_columns(grid, t, x))


def test_taps_are_a_unit_gain_causal_lowpass():
    taps = antialias_taps(1000.0, MODEL_RATE)
    assert len(taps) % 2 == 1 and taps.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(taps, taps[::-1])  # linear phase
    t = np.arange(200) / 1000.0
    step = (t >= 0.1).astype(float)[:, None]
    y = antialias(t, step, MODEL_RATE)[:, 0]
    assert np.all(y[t < 0.1] == 0.0)  # causal: nothing before the step
    assert y[-1] == pytest.approx(1.0)


def _stream(model, flight, ends):
    """Streaming windows of ``seq`` (IMU and rotor at its rate) at the stamps ``ends``."""
    pred = StreamingPredictor(model, PredictorConfig(max_imu_rate=1000.0))
    out, ends = {}, set(int(i) for i in ends)
    for i, t in enumerate(flight.t):
        pred.push_rotor(t, flight.rotor[i])
        pred.push_imu(t, flight.acc[i], flight.gyro[i])
        if i in ends:
            res = pred.window()
            assert not isinstance(res, str), res
            out[i] = res
    return pred, out


def test_streaming_window_equals_training_window_at_1khz():
    """The predictor's ring buffer (window + 0.5 s) gives the training windows' values, also after it
    has dropped old samples, because the causal FIR needs only the last 50 ms before a window."""
    flight = make_flight(2, duration=7.0, rate=1000.0, kind="speed")
    cfg = ModelConfig(rotor_kind="speed", num_bins=16)
    ds = WindowDataset([flight], cfg)
    model = VeloBinsNet(cfg).eval()
    ends_model = np.array([99, 150, 400, 650])  # windows ending at 0.99 s … 6.5 s (ring trimmed from ~3 s)
    pred, wins = _stream(model, flight, ends_model * 10)
    assert pred._imu.trimmed
    for k, i in zip(ends_model, ends_model * 10, strict=True):
        stamp, win = wins[i]
        assert stamp == pytest.approx(k / 100.0)
        np.testing.assert_allclose(win, ds.inputs[k - 99 : k + 1].numpy(), rtol=1e-6, atol=1e-4)
        # and against the float64 offline path on the whole flight
        grid = stamp - np.arange(99, -1, -1) / 100.0
        full = np.c_[flight.acc, flight.gyro, flight.rotor]
        np.testing.assert_allclose(win, to_model_grid(grid, flight.t[: i + 1], full[: i + 1], 100.0), rtol=1e-12)


def test_buffer_without_the_filter_history_is_refused():
    """A stream faster than max_imu_rate leaves the ring without the FIR's history: no window
    rather than one that differs from training."""
    model = VeloBinsNet(ModelConfig(num_bins=16)).eval()
    pred = StreamingPredictor(model, PredictorConfig(max_imu_rate=101.0))  # keeps ~1.5 s at 101 Hz
    rate = 1000.0
    for i in range(int(3.0 * rate)):
        t = i / rate
        pred.push_rotor(t, [0.5] * 4)
        pred.push_imu(t, [0.0, 0.0, 9.8], [0.0, 0.0, 0.0])
    assert pred._imu.trimmed and pred.window() == "insufficient_imu"
