"""Test oracles: the straightforward, module-by-module computation of the network and of the labels.

These are second implementations on purpose: the tests hold the model's one definition
(:mod:`velobins_net.model`, :mod:`velobins_net.encoder`, :mod:`velobins_net.labels`) to them, and
``benchmarks/bench_net_train.py`` / ``bench_net_latency.py`` time them as the "straightforward"
baseline (the pre-optimisation implementation: every token through every layer, PyTorch's
attention, bin features recomputed per call, every label row iterated until the last converges).
Plain ``F.linear`` throughout, so the oracle and that baseline stay what they were.

Also the helpers the model's tests share: the accelerator switch for a block, and output comparison.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from velobins_net import accel
from velobins_net.bins import BinGrid
from velobins_net.config import SIGMA_MIN_BIN_FRACTION
from velobins_net.decoders import RTMOSigmaHead
from velobins_net.encoder import Encoder
from velobins_net.labels import _TILT_MAX_ITER, _TILT_TOL
from velobins_net.model import NetOutput, VeloBinsNet
from velobins_net.transformer import TransformerLayer

_SQRT_HALF = 0.5**0.5


@contextmanager
def accelerator(on: bool) -> Iterator[None]:
    """The accelerator switch (:func:`velobins_net.accel.set_enabled`) set for a block, restored after it."""
    previous = accel.set_enabled(on)
    try:
        yield
    finally:
        accel.set_enabled(previous)


def assert_same_outputs(a: NetOutput, b: NetOutput, rtol: float = 1e-5, atol: float = 5e-6) -> None:
    """Every field of two outputs present in both or in neither, and equal to float rounding.

    atol: float32 rounding of differently ordered sums (the native attention kernel vs PyTorch's,
    a fold vs the layer it replaces); either leaves up to ~1.5e-6 on v for these test models.
    """
    for name in NetOutput._fields:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, msg=name)


def reference_layer(layer: TransformerLayer, x: torch.Tensor) -> torch.Tensor:
    """Pre-norm transformer layer on every token with PyTorch's attention; x (B, T, d) → (B, T, d)."""
    b, n, d = x.shape
    h = layer.num_heads

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.view(b, n, h, d // h).transpose(1, 2)

    y = layer.norm1(x)
    w, bias = layer.qkv.weight, layer.qkv.bias
    q = F.linear(y, w[:d], bias[:d])
    k, v = F.linear(y, w[d:], bias[d:]).split(d, dim=-1)
    a = F.scaled_dot_product_attention(split(q), split(k), split(v)).transpose(1, 2).reshape(b, n, d)
    x = x + F.linear(a, layer.out.weight, layer.out.bias)
    y = F.gelu(F.linear(layer.norm2(x), layer.ff1.weight, layer.ff1.bias))
    return x + F.linear(y, layer.ff2.weight, layer.ff2.bias)


def reference_encoder(enc: Encoder, x: torch.Tensor) -> torch.Tensor:
    """Raw window (B, T, 6+K) → h (B, D_h): rotor feature, standardisation, the three branches, every token."""
    if enc.square_rotor:
        x = torch.cat([x[..., :6], x[..., 6:].square()], dim=-1)
    z = ((x - enc.norm_mean) / enc.norm_std).transpose(1, 2)  # (B, C, T)
    z = torch.cat([enc.acc_conv(z[:, :3]), enc.gyro_conv(z[:, 3:6]), enc.rotor_conv(z[:, 6:])], dim=1)
    z = F.gelu(enc.mix_conv(F.gelu(z)))
    z = enc.proj(z.transpose(1, 2)) + enc.time_pe
    for layer in enc.layers:
        z = reference_layer(layer, z)
    return enc.norm(z[:, -1])


def reference_forward(model: VeloBinsNet, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
    """The network module by module, each head on its own, decoded by the paper's sums written out."""
    h = reference_encoder(model.encoder, x)
    source = uncertainty or model.cfg.uncertainty
    raw = model.cov.linear(h) if model.cov is not None else None
    rtmo_sigma = None
    if isinstance(model.cov, RTMOSigmaHead):  # M head: RTMO's σ = max(0.1·sigmoid, 1e-3), Laplace b = 2σ·2R
        assert raw is not None
        rtmo_sigma = torch.clamp(0.1 * torch.sigmoid(raw), min=1e-3)
        b = 2.0 * rtmo_sigma * model.cov.span
        sigma2 = 2.0 * b * b
        log_sigma = 0.5 * torch.log(sigma2)
    else:
        log_sigma = raw
        sigma2 = None if log_sigma is None else torch.exp(2.0 * log_sigma)
    if model.bins is None:
        assert model.reg is not None and sigma2 is not None
        return NetOutput(model.reg.linear(h), sigma2, None, None, log_sigma)
    dec = model.bins
    if dec.encoding == "direct":
        logits = dec.theta(h).view(h.shape[0], 3, dec.num_bins)
    else:
        enc = dec.pe if dec.gamma is None else torch.sin(dec.gamma * dec.pe)
        logits = dec.theta(h).view(h.shape[0], 3, dec.enc_dim) @ dec.phi(enc).t()
    p = torch.softmax(logits, dim=-1)
    v = (p * dec.centres).sum(-1)
    bin_var = (p * (dec.centres - v.unsqueeze(-1)) ** 2).sum(-1)
    if source == "B":
        var = bin_var
    else:
        assert sigma2 is not None
        var = sigma2 if source == "C" else bin_var + sigma2
    return NetOutput(v, var, logits, bin_var, log_sigma, rtmo_sigma)


@torch.no_grad()
def reference_error_conditioned_labels(v_hat: torch.Tensor, v: torch.Tensor, grid: BinGrid) -> torch.Tensor:
    """Straightforward implementation of :func:`error_conditioned_labels` (same definition, §III-C).

    Φ and 1 − Φ at every edge (two ``erfc`` calls), then Newton on every row until the worst row
    has converged (one shared stopping test), same safeguards. Kept as the test oracle for the
    optimised solver and as the label step of the "straightforward" training benchmark baseline.
    """
    centres = grid.centres(torch.float64).to(v.device)
    v64 = v.detach().to(torch.float64).clamp(float(centres[0]), float(centres[-1]))
    sigma = (v_hat.detach().to(torch.float64) - v64).abs().clamp_min(SIGMA_MIN_BIN_FRACTION * grid.width)
    lower, upper = grid.edges(torch.float64)
    edges = torch.cat([lower, upper[-1:]]).to(v.device)
    z = (edges - v64.unsqueeze(-1)) / sigma.unsqueeze(-1)
    cdf = 0.5 * torch.special.erfc(-z * _SQRT_HALF)
    sf = 0.5 * torch.special.erfc(z * _SQRT_HALF)
    mass = torch.where(z[..., :-1] >= 0, sf[..., :-1] - sf[..., 1:], cdf[..., 1:] - cdf[..., :-1]).clamp_min(0.0)
    q = mass / mass.sum(-1, keepdim=True)
    u = centres / grid.velocity_range
    t = v64 / grid.velocity_range
    logq = torch.log(q)
    eta = torch.zeros_like(t)
    lo = torch.full_like(t, -torch.inf)
    hi = torch.full_like(t, torch.inf)
    p = q
    for _ in range(_TILT_MAX_ITER):
        p = torch.softmax(logq + eta.unsqueeze(-1) * u, dim=-1)
        m = p @ u
        f = m - t
        if bool((f.abs() < _TILT_TOL).all()):
            break
        var = (p * (u - m.unsqueeze(-1)).square()).sum(-1)
        lo = torch.where(f < 0, eta, lo)
        hi = torch.where(f > 0, eta, hi)
        newton = eta - f / var.clamp_min(1e-300)
        ok = (newton > lo) & (newton < hi) & torch.isfinite(newton)
        both = torch.isfinite(lo) & torch.isfinite(hi)
        fallback = torch.where(
            both,
            0.5 * (lo + hi),
            torch.where(torch.isfinite(lo), lo + lo.abs().clamp_min(1.0), hi - hi.abs().clamp_min(1.0)),
        )
        eta = torch.where(f.abs() < _TILT_TOL, eta, torch.where(ok, newton, fallback))
    return p.to(v.dtype)
