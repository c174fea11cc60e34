"""Losses against their formulas, and the variant grammar of Table II."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from velobins_net.bins import BinGrid
from velobins_net.config import ModelConfig
from velobins_net.losses import gaussian_nll_sum_over_axes, huber_loss, kl_loss, variant_loss
from velobins_net.model import VeloBinsNet
from velobins_net.train import TrainConfig, resolve_model_config
from velobins_net.variants import all_variants, parse_variant

torch.set_num_threads(1)


def test_huber_piecewise():
    v = torch.zeros(1, 3)
    v_hat = torch.tensor([[0.05, -0.3, 0.0]])
    expected = 0.5 * 0.05**2 + 0.1 * (0.3 - 0.05)
    assert float(huber_loss(v_hat, v)) == pytest.approx(expected)


def test_kl_zero_iff_equal_and_matches_formula():
    logits = torch.randn(2, 3, 7, dtype=torch.float64)
    pi = torch.softmax(logits, -1)
    assert float(kl_loss(pi, logits)) == pytest.approx(0.0, abs=1e-12)
    q = torch.softmax(torch.randn(2, 3, 7, dtype=torch.float64), -1)
    q[0, 0, :3] = 0
    q = q / q.sum(-1, keepdim=True)
    qn, pn = q.numpy(), pi.numpy()
    safe = np.where(qn > 0, qn, 1.0)
    ref = (qn * (np.log(safe) - np.log(pn))).sum(-1).sum(-1).mean()
    assert float(kl_loss(q, logits)) == pytest.approx(ref, rel=1e-10)


def test_gaussian_nll_formula():
    v_hat, v, ls = torch.tensor([[0.1, 0.0, 0.0]]), torch.tensor([[0.3, 0.0, 0.0]]), torch.tensor([[-1.0, 0.0, 0.5]])
    ref = sum(
        0.5 * math.log(2 * math.pi) + s + 0.5 * e**2 / math.exp(2 * s)
        for e, s in zip([0.2, 0, 0], [-1, 0, 0.5], strict=True)
    )
    assert float(gaussian_nll_sum_over_axes(v_hat, ls, v)) == pytest.approx(ref, rel=1e-6)


def test_variant_grammar():
    assert parse_variant("G+H^B").supervision == "G+H"
    assert parse_variant("M+H^B+C").uncertainty == "B+C"
    assert parse_variant("reg").is_regression and parse_variant("reg").uncertainty == "C"
    assert parse_variant("G+H").name == "G+H^B"
    for bad, msg in [
        ("H^C", "not meaningful"),
        ("G^B+C", "not meaningful"),
        ("X^B", "unknown"),
        ("G+H^Q", "not meaningful"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_variant(bad)
    names = {v.name for v in all_variants()}
    assert names == {"reg", "H^B", "M^B", "M^C", "M^B+C", "G^B", "G+H^B", "M+H^B", "M+H^C", "M+H^B+C"}


@pytest.mark.parametrize("name", [v.name for v in all_variants()])
def test_every_variant_builds_and_backpropagates(name):
    variant = parse_variant(name)
    mcfg = resolve_model_config(TrainConfig(model=ModelConfig(num_bins=16), variant=name), variant, 2.0)
    torch.manual_seed(0)
    model = VeloBinsNet(mcfg)
    out = model(torch.randn(3, 100, 10))
    v = torch.randn(3, 3).clamp(-1.5, 1.5)
    centres = model.bins.centres if model.bins is not None else torch.empty(0)
    loss, terms = variant_loss(variant, out, v, BinGrid(16, 2.0), centres, use_nll=True)
    loss.backward()
    expected = {
        "reg": {"nll"},
        "H": {"huber"},
        "M": {"mle"},
        "G": {"kl"},
        "G+H": {"kl", "huber"},
        "M+H": {"mle", "huber"},
    }
    assert set(terms) == expected[variant.supervision]
    assert math.isfinite(float(loss.detach()))
    assert all(p.grad is not None for p in model.parameters())
    if "C" in variant.uncertainty and not variant.is_regression:
        sig2 = torch.exp(2 * out.log_sigma)  # log σ of the M head: log of its Laplace kernel's std
        ref = sig2 if variant.uncertainty == "C" else sig2 + out.bin_var
        torch.testing.assert_close(out.var, ref)
