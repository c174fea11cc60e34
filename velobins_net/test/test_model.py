"""Encoder/decoder structure, parameter counts, last-token exactness, bin-encoding cache, decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference import reference_encoder, reference_forward

from velobins_net.bins import BinGrid, bin_variance, decode, expected_velocity, velocity_range_from
from velobins_net.config import ModelConfig
from velobins_net.model import VeloBinsNet, count_parameters

torch.set_num_threads(1)


def test_encoder_parameter_count_matches_paper():
    model = VeloBinsNet(ModelConfig(num_rotors=4))
    n = count_parameters(model.encoder)
    assert n == 69_936
    assert abs(n - 69_800) / 69_800 < 0.01


@pytest.mark.parametrize("n_bins", [16, 64, 512, 2048])
def test_spe_decoder_parameter_count_is_independent_of_bins(n_bins):
    model = VeloBinsNet(ModelConfig(num_bins=n_bins, bin_encoding="spe"))
    assert count_parameters(model.bins) == 64 + 32 * 65 + 3 * 32 * 49 == 6_848
    pe = VeloBinsNet(ModelConfig(num_bins=n_bins, bin_encoding="pe"))
    assert count_parameters(pe.bins) == 6_848 - 64  # no γ
    direct = VeloBinsNet(ModelConfig(num_bins=n_bins, bin_encoding="direct"))
    assert count_parameters(direct.bins) == 3 * n_bins * 49


@pytest.mark.parametrize("head,kw", [("bins", {}), ("bins", {"bin_encoding": "direct"}), ("reg", {"uncertainty": "C"})])
def test_last_token_only_equals_all_token_computation(head, kw):
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(head=head, **kw)).eval()
    x = torch.randn(4, 100, 10)
    with torch.no_grad():
        fast = model(x)
        slow = reference_forward(model, x)
        h_fast = model.encoder(x)
        h_slow = reference_encoder(model.encoder, x)
    torch.testing.assert_close(h_fast, h_slow, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.v, slow.v, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.var, slow.var, rtol=1e-5, atol=1e-6)


def test_bin_encodings_are_computed_once_without_gradients_and_follow_parameters(monkeypatch):
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=32)).eval()
    dec = model.bins
    calls = []
    real = dec.bin_features
    monkeypatch.setattr(dec, "bin_features", lambda: calls.append(1) or real())
    x = torch.randn(6, 100, 10)  # more windows than the frozen path takes: the eager forward
    with torch.inference_mode():
        a = model(x)
        b = model(x)
    assert len(calls) == 1  # computed once, reused
    torch.testing.assert_close(b.logits, a.logits)
    with torch.no_grad():
        dec.gamma.mul_(2.0)  # a training step changes the encodings
    with torch.no_grad():
        c = model(x)
    assert len(calls) == 2
    torch.testing.assert_close(c.logits, reference_forward(model, x).logits, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(c.logits, a.logits)
    # loading new weights must also be seen
    other = VeloBinsNet(ModelConfig(num_bins=32)).eval()
    with torch.no_grad():
        other(x)
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(other(x).logits, c.logits)
    model.train()
    model(x).v.sum().backward()  # with gradients: computed afresh, so they reach gamma
    assert len(calls) == 3 and dec.gamma.grad is not None


def test_cached_features_usable_outside_inference_mode_with_grad():
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=16)).eval()
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        ref = model(x)  # fills the inference cache of derived weights
    xg = x.clone().requires_grad_(True)
    out = model(xg)  # no "inference tensor" error, and the same numbers as in inference mode
    torch.testing.assert_close(out.v, ref.v)
    torch.testing.assert_close(out.var, ref.var)
    out.v.sum().backward()
    assert xg.grad is not None and torch.isfinite(xg.grad).all() and xg.grad.abs().sum() > 0
    no_grad = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not no_grad, f"the cached path cut the gradient of {no_grad}"


def test_decode_matches_definitions():
    rng = np.random.default_rng(1)
    b = np.linspace(-2, 2, 11)
    p = rng.dirichlet(np.ones(11), size=(5, 3))
    v = expected_velocity(torch.from_numpy(p), torch.from_numpy(b))
    var = bin_variance(torch.from_numpy(p), torch.from_numpy(b), v)
    v2, var2 = decode(torch.from_numpy(np.log(p)), torch.from_numpy(b))
    np.testing.assert_allclose(v2.numpy(), v.numpy(), rtol=1e-12)
    np.testing.assert_allclose(var2.numpy(), var.numpy(), rtol=1e-12)
    v_ref = (p * b).sum(-1)
    var_ref = (p * (b - v_ref[..., None]) ** 2).sum(-1)
    np.testing.assert_allclose(v.numpy(), v_ref, rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-12)


def test_bin_grid_edges_and_range():
    g = BinGrid(8, 2.0)
    c = g.centres(torch.float64)
    lo, hi = g.edges()
    assert lo[0] == -2.0 and hi[-1] == 2.0
    torch.testing.assert_close(hi[:-1], 0.5 * (c[1:] + c[:-1]))
    torch.testing.assert_close(lo[1:], hi[:-1])
    assert g.width == pytest.approx(0.5)
    v = [np.array([[0.5, -3.0, 1.0]]), np.array([[2.0, 0.0, 0.1]])]
    assert velocity_range_from(v) == pytest.approx(1.1 * 3.0)
    with pytest.raises(ValueError, match="array 0"):
        velocity_range_from([np.zeros((3, 2))])


def test_normalisation_buffers_frozen_and_rpm_squared():
    cfg = ModelConfig(rotor_kind="speed")
    model = VeloBinsNet(cfg).eval()
    mean = torch.arange(10.0)
    std = torch.full((10,), 2.0)
    model.encoder.set_normalization(mean, std)
    x = torch.randn(2, 100, 10)
    with torch.inference_mode():
        model(x * 5)
    torch.testing.assert_close(model.encoder.norm_mean, mean)
    assert "encoder.norm_mean" in model.state_dict()
    z = model.encoder.standardise(x)
    torch.testing.assert_close(z[..., 6:], (x[..., 6:] ** 2 - mean[6:]) / 2.0)
    torch.testing.assert_close(z[..., :6], (x[..., :6] - mean[:6]) / 2.0)
    with pytest.raises(ValueError, match="std"):
        model.encoder.set_normalization(mean, torch.zeros(10))


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="rotor_kind"):
        ModelConfig(rotor_kind="rps")
    with pytest.raises(ValueError, match="uncertainty"):
        ModelConfig(uncertainty="B+C", cov_head=False)
