"""Streaming predictor (rate limit, resampling, staleness, reasons) and export parity."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from velobins_net.config import ModelConfig
from velobins_net.export import export_onnx, export_torchscript
from velobins_net.inference import PredictorConfig, StreamingPredictor
from velobins_net.model import VeloBinsNet

torch.set_num_threads(1)


def _model(**kw) -> VeloBinsNet:
    torch.manual_seed(0)
    return VeloBinsNet(ModelConfig(num_bins=64, **kw)).eval()


def _signals(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    acc = np.c_[np.sin(t), np.cos(2 * t), 9.8 + 0.1 * t]
    gyro = np.c_[0.1 * t, np.sin(3 * t), -t]
    rot = np.c_[0.5 + 0.1 * np.sin(t), 0.4 + 0.0 * t, 0.6 - 0.01 * t, 0.5 + 0.05 * np.cos(t)]
    return acc, gyro, rot


def test_streaming_rate_window_and_equivalence():
    model = _model()
    pred = StreamingPredictor(model, PredictorConfig(max_rotor_age=0.05), return_probs=True)
    t_imu = np.arange(0, 2.0, 1 / 200)  # 200 Hz IMU
    t_rot = np.arange(0, 2.0, 1 / 50)  # 50 Hz rotor
    acc, gyro, _ = _signals(t_imu)
    _, _, rot = _signals(t_rot)
    outs, j = [], 0
    for i, t in enumerate(t_imu):
        while j < len(t_rot) and t_rot[j] <= t:
            pred.push_rotor(t_rot[j], rot[j])
            j += 1
        pred.push_imu(t, acc[i], gyro[i])
        p = pred.step()
        if p is not None:
            outs.append(p)
    stamps = np.array([p.stamp for p in outs])
    assert stamps[0] == pytest.approx(0.99, abs=1e-9)  # first full 1 s window
    np.testing.assert_allclose(np.diff(stamps), 0.05, atol=1e-9)  # 20 Hz
    assert pred.counts["ok"] == len(outs) and pred.counts["insufficient_imu"] > 0 and pred.counts["rate_limited"] > 0
    last = outs[-1]
    assert last.probs.shape == (3, 64)
    np.testing.assert_allclose(last.probs.sum(-1), 1.0, rtol=1e-5)
    # same as the network on the window built by hand (100 Hz grid ending at the stamp)
    grid = last.stamp - np.arange(99, -1, -1) / 100
    a, g, _ = _signals(grid)
    r = np.stack([np.interp(grid, t_rot, rot[:, k]) for k in range(4)], 1)
    x = torch.from_numpy(np.c_[a, g, r].astype(np.float32))[None]
    with torch.no_grad():
        ref = model(x)
    np.testing.assert_allclose(last.velocity, ref.v[0].numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(last.variance, ref.var[0].numpy(), rtol=1e-4, atol=1e-6)


def test_streaming_rejects_stale_rotor_and_bad_samples():
    pred = StreamingPredictor(_model(), PredictorConfig(max_rotor_age=0.1))
    for t in np.arange(0, 1.5, 0.01):
        pred.push_imu(t, [0, 0, 9.8], [0, 0, 0])
    assert pred.step() is None and pred.counts["no_rotor"] == 1
    pred.push_rotor(0.0, [0.5] * 4)
    pred.push_rotor(1.2, [0.5] * 4)
    assert pred.step() is None and pred.counts["rotor_stale"] == 1  # newest rotor 0.29 s old
    pred.push_rotor(1.45, [0.5] * 4)
    assert pred.step() is not None
    assert not pred.push_imu(1.0, [0, 0, 9.8], [0, 0, 0]) and pred.counts["out_of_order"] == 1
    assert not pred.push_imu(2.0, [np.nan, 0, 0], [0, 0, 0]) and pred.counts["non_finite"] == 1
    assert not pred.push_rotor(2.0, [0.5] * 3) and pred.counts["non_finite"] == 2


@pytest.mark.parametrize("kw", [{}, {"head": "reg", "uncertainty": "C"}])
def test_export_parity_torchscript_and_onnx(tmp_path, kw):
    model = _model(**kw)
    x = torch.randn(3, 100, 10)
    with torch.no_grad():
        ref = model(x)
    ts = torch.jit.load(str(export_torchscript(model, tmp_path / "m.pt")))
    with torch.no_grad():
        out = ts(x)
    torch.testing.assert_close(out[0], ref.v, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[1], ref.var, rtol=1e-5, atol=1e-6)
    sess = ort.InferenceSession(str(export_onnx(model, tmp_path / "m.onnx")))
    got = sess.run(None, {"window": x.numpy()})
    np.testing.assert_allclose(got[0], ref.v.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], ref.var.numpy(), rtol=1e-4, atol=1e-5)
    if model.bins is not None:
        assert len(got) == 3 and got[2].shape == (3, 3, 64)
        np.testing.assert_allclose(got[2], torch.softmax(ref.logits, -1).numpy(), atol=1e-5)
