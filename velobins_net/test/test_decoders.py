"""Decoders on h: bin decoder (eq:softmax, eq:spe), regression head, covariance decoders, reported variance."""

from __future__ import annotations

import pytest
import torch
from reference import accelerator, reference_forward

from velobins_net.config import AIIO_FILTER_MIN_LOG_STD, ModelConfig
from velobins_net.decoders import BinDecoder, CovarianceHead, RegressionHead, RTMOSigmaHead
from velobins_net.model import VeloBinsNet, count_parameters

torch.set_num_threads(1)


@pytest.mark.parametrize("n_bins", [16, 64, 512, 2048])
def test_spe_decoder_parameter_count_is_independent_of_bins(n_bins):
    assert count_parameters(BinDecoder(ModelConfig(num_bins=n_bins, bin_encoding="spe"))) == 64 + 32 * 65 + 3 * 32 * 49
    assert count_parameters(BinDecoder(ModelConfig(num_bins=n_bins, bin_encoding="pe"))) == 6_848 - 64  # no γ
    direct = BinDecoder(ModelConfig(num_bins=n_bins, bin_encoding="direct"))
    assert count_parameters(direct) == 3 * n_bins * 49


@pytest.mark.parametrize("encoding", ["spe", "pe", "direct"])
def test_bin_decoder_scores_queries_against_bin_features(encoding):
    torch.manual_seed(0)
    dec = BinDecoder(ModelConfig(num_bins=24, bin_encoding=encoding))
    h = torch.randn(5, 48)
    logits, v, var = dec(h)
    if encoding == "direct":
        want = dec.theta(h).view(5, 3, 24)
    else:
        enc = dec.pe if dec.gamma is None else torch.sin(dec.gamma * dec.pe)
        want = dec.theta(h).view(5, 3, 32) @ dec.phi(enc).t()
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    p = torch.softmax(want, -1)
    torch.testing.assert_close(v, p @ dec.centres, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(var, (p * (dec.centres - v[..., None]) ** 2).sum(-1), rtol=1e-4, atol=1e-6)


def test_bin_encodings_are_computed_once_without_gradients_and_follow_parameters(monkeypatch):
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=32)).eval()
    dec = model.bins
    calls = []
    real = dec.bin_features
    monkeypatch.setattr(dec, "bin_features", lambda: calls.append(1) or real())
    x = torch.randn(6, 100, 10)  # more windows than the traced path takes: the eager forward
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
    other = VeloBinsNet(ModelConfig(num_bins=32)).eval()  # loading new weights is seen too
    with torch.no_grad():
        other(x)
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(other(x).logits, c.logits)
    with accelerator(False), torch.no_grad():  # the plain branch computes them on every call
        model(x)
        model(x)
    assert len(calls) == 4
    model.train()
    model(x).v.sum().backward()  # with gradients: computed afresh, so they reach γ
    assert len(calls) == 5 and dec.gamma.grad is not None


@pytest.mark.parametrize("batch", [2, 6])  # traced, eager
def test_cached_features_usable_outside_inference_mode_with_grad(batch):
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=16)).eval()
    x = torch.randn(batch, 100, 10)
    with torch.inference_mode():
        ref = model(x)  # fills the inference caches of derived weights
    xg = x.clone().requires_grad_(True)
    out = model(xg)  # no "inference tensor" error, and the same numbers as in inference mode
    torch.testing.assert_close(out.v, ref.v)
    torch.testing.assert_close(out.var, ref.var)
    out.v.sum().backward()
    assert xg.grad is not None and torch.isfinite(xg.grad).all() and xg.grad.abs().sum() > 0
    no_grad = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not no_grad, f"the cached path cut the gradient of {no_grad}"


def test_covariance_heads_give_their_variance_and_log_sigma():
    torch.manual_seed(0)
    h = torch.randn(7, 48) * 5
    aiio = CovarianceHead(48)
    out = aiio(h)
    log_sigma = aiio.linear(h)
    torch.testing.assert_close(out.log_sigma, log_sigma)
    torch.testing.assert_close(out.var, torch.exp(2 * log_sigma.clamp_min(AIIO_FILTER_MIN_LOG_STD)))
    assert out.rtmo_sigma is None and bool((log_sigma < AIIO_FILTER_MIN_LOG_STD).any())  # the floor was met
    rtmo = RTMOSigmaHead(48, velocity_range=1.5)
    out = rtmo(h)
    sigma = (0.1 * torch.sigmoid(rtmo.linear(h))).clamp_min(1e-3)
    torch.testing.assert_close(out.rtmo_sigma, sigma)
    torch.testing.assert_close(out.var, 2 * (2 * sigma * 3.0) ** 2)  # Laplace scale b = 2σ·2R, variance 2b²
    torch.testing.assert_close(out.log_sigma, 0.5 * torch.log(out.var))
    reg = RegressionHead(48)
    torch.testing.assert_close(reg(h), reg.linear(h))
