"""Streaming predictor (rate limit, resampling, staleness, reasons, variance scale, axis factors), export parity."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from velobins_net.config import ModelConfig
from velobins_net.export import export_onnx, export_torchscript
from velobins_net.inference import PredictorConfig, StreamingPredictor, axis_scaled, load_predictor_config
from velobins_net.model import VeloBinsNet
from velobins_net.resample import antialias

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
    # same as the network on the window built by hand (100 Hz grid ending at the stamp; the 200 Hz
    # IMU anti-alias filtered first, as in training; the 50 Hz rotor only interpolated)
    grid = last.stamp - np.arange(99, -1, -1) / 100
    n = int(np.searchsorted(t_imu, last.stamp, side="right"))
    imu = antialias(t_imu[:n], np.c_[acc, gyro][:n], 100.0)
    ag = np.stack([np.interp(grid, t_imu[:n], imu[:, c]) for c in range(6)], 1)
    r = np.stack([np.interp(grid, t_rot, rot[:, k]) for k in range(4)], 1)
    x = torch.from_numpy(np.c_[ag, r].astype(np.float32))[None]
    with torch.no_grad():
        ref = model(x)
    np.testing.assert_allclose(last.velocity, ref.v[0].numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(last.variance, ref.var[0].numpy(), rtol=1e-4, atol=1e-6)
    assert last.kind == "velocity" and last.velocity is last.measurement
    with pytest.raises(ValueError, match="measures velocity, not displacement"):
        _ = last.displacement


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


def test_rotor_samples_taken_ahead_of_the_imu_do_not_hide_a_rotor_gap():
    """Rotor samples up to 1.0 s, none in [1.0, 2.0), then from 2.0 s on, all taken before the IMU reaches
    the gap (a node busy with an IMU backlog takes the rotor stream's newer samples first): a window ending
    inside the gap is stale, since its newest rotor sample at or before its end is older than max_rotor_age."""
    pred = StreamingPredictor(_model(), PredictorConfig(max_rotor_age=0.1))
    for t in [*np.arange(0.0, 1.0, 0.01), *np.arange(2.0, 2.5, 0.01)]:
        pred.push_rotor(t, [0.5] * 4)
    for t in np.arange(0.0, 1.5, 0.01):
        pred.push_imu(t, [0, 0, 9.8], [0, 0, 0])
    assert pred.step() is None and pred.counts["rotor_stale"] == 1  # window end 1.49: newest rotor before it 0.99
    for t in np.arange(1.5, 2.2, 0.01):
        pred.push_imu(t, [0, 0, 9.8], [0, 0, 0])
    assert pred.step() is not None  # window end 2.19: rotor fresh again (the gap inside the window is the model's)


def _run(pred: StreamingPredictor, duration: float = 1.6) -> list:
    out = []
    for t in np.arange(0, duration, 0.01):
        pred.push_rotor(t, [0.5, 0.4, 0.6, 0.5])
        pred.push_imu(t, [np.sin(t), 0.2, 9.8], [0.0, 0.1 * t, 0.0])
        p = pred.step()
        if p is not None:
            out.append(p)
    return out


def test_variance_scale_multiplies_the_reported_variance(tmp_path):
    model = _model()
    ref = _run(StreamingPredictor(model, PredictorConfig()))
    scaled_pred = StreamingPredictor(model, PredictorConfig(variance_scale=2.5))
    scaled = _run(scaled_pred)
    assert len(ref) == len(scaled) > 5
    for a, b in zip(ref, scaled, strict=True):
        np.testing.assert_array_equal(a.velocity, b.velocity)
        np.testing.assert_allclose(b.variance, 2.5 * a.variance, rtol=1e-12)
    # live: a changed scale applies to the next estimate
    scaled_pred.set_config(PredictorConfig(variance_scale=0.5))
    nxt = _run(scaled_pred, duration=1.7)  # continues the stream (earlier stamps are refused)
    full = {round(p.stamp, 6): p for p in _run(StreamingPredictor(model, PredictorConfig()), duration=1.7)}
    assert nxt and nxt[-1].stamp > scaled[-1].stamp
    for p in nxt:
        np.testing.assert_allclose(p.variance, 0.5 * full[round(p.stamp, 6)].variance, rtol=1e-12)
    # the overlay `velobins calibrate` writes reaches the config the node and `velobins evaluate` read
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("/**/velobins_net:\n  ros__parameters:\n    predictor:\n      variance_scale: 3.0\n")
    assert load_predictor_config([overlay]).variance_scale == 3.0
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="variance_scale"):
            PredictorConfig(variance_scale=bad)


def test_axis_variance_factors_scale_each_axis_after_the_variance_scale(tmp_path):
    """R_i = k_i·s·σ̂²_i per body axis; an overlay's list reaches the config; a bad one is refused."""
    model = _model()
    k = (0.5, 1.0, 4.0)
    ref = _run(StreamingPredictor(model, PredictorConfig(variance_scale=2.0)))
    axes = _run(StreamingPredictor(model, PredictorConfig(variance_scale=2.0, axis_variance_factors=k)))
    assert len(ref) == len(axes) > 5
    for a, b in zip(ref, axes, strict=True):
        np.testing.assert_array_equal(a.velocity, b.velocity)
        np.testing.assert_allclose(b.variance, np.asarray(k) * a.variance, rtol=1e-12)
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "/**/velobins_net:\n  ros__parameters:\n    predictor:\n      axis_variance_factors: [0.5, 1, 4.0]\n"
    )
    assert load_predictor_config([overlay]).axis_variance_factors == k
    for bad in ((1.0, 1.0), (1.0, 0.0, 1.0)):
        with pytest.raises(ValueError, match="axis_variance_factors"):
            PredictorConfig(axis_variance_factors=bad)


def test_axis_scaled_keeps_a_full_covariance_s_correlations():
    """A full covariance becomes D·C·D, D = diag(√k): each axis's variance times its factor, correlations kept."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T + np.eye(3)
    k = (0.25, 2.0, 9.0)
    var, scaled = axis_scaled(np.diag(cov).copy(), cov, k)
    np.testing.assert_allclose(var, np.asarray(k) * np.diag(cov))
    np.testing.assert_allclose(np.diag(scaled), var)
    corr = [c / np.sqrt(np.outer(np.diag(c), np.diag(c))) for c in (cov, scaled)]
    np.testing.assert_allclose(corr[1], corr[0], rtol=1e-12)
    assert axis_scaled(var, cov, (1.0, 1.0, 1.0)) == (var, cov)


def test_offline_predictions_carry_the_scale():
    """velobins_eval.evaluate.predict_flight (every offline number) runs the node's predictor, scale included."""
    from synthetic import make_flight

    from velobins_eval.evaluate import predict_flight

    class _Flight(type(make_flight(0))):
        def __len__(self) -> int:
            return len(self.t)

    seq = make_flight(0, duration=2.0)
    flight = _Flight(**{f: getattr(seq, f) for f in seq.__dataclass_fields__})
    model = _model()
    t1, v1, var1 = predict_flight(model, flight, PredictorConfig())
    t2, v2, var2 = predict_flight(model, flight, PredictorConfig(variance_scale=4.0))
    np.testing.assert_array_equal(t1, t2)
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_allclose(var2, 4.0 * var1, rtol=1e-12)


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
