"""M variants: RTMO's maximum-likelihood loss and bounded σ head (docs/design.md, "M: RTMO's MLE loss").

The loss is held to a direct evaluation of RTMO's definition (mmpose ``DCC.generate_target_heatmap``
+ ``MLECCLoss``) and to numerical integration of the mixture density; the head's σ to RTMO's
bounds; the reported variance B+C to the mixture's variance; old M checkpoints to a one-line refusal.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from synthetic import make_flight

from velobins_net.bins import BinGrid
from velobins_net.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.decoders import RTMO_SIGMA_MAX, RTMO_SIGMA_MIN, laplace_scale, laplace_variance, rtmo_sigma
from velobins_net.inference import load_checkpoint
from velobins_net.losses import RTMO_LIKELIHOOD_FLOOR, rtmo_mle_loss, variant_loss
from velobins_net.model import VeloBinsNet
from velobins_net.train import TrainConfig, train
from velobins_net.variants import parse_variant

torch.set_num_threads(1)


def _rtmo_direct(logits: np.ndarray, sigma: np.ndarray, v: np.ndarray, b: np.ndarray, span: float) -> float:
    """RTMO's loss written out with loops: hm = exp(−d/2)/σ, d = |t − b_n|/(s σ); −log(Π_axes Σ_n π hm + 1e-4)."""
    losses = []
    for k in range(logits.shape[0]):
        prob = 1.0
        for i in range(3):
            pi = np.exp(logits[k, i] - logits[k, i].max())
            pi /= pi.sum()
            d = np.abs(v[k, i] - b) / span / sigma[k, i]
            prob *= float((pi * np.exp(-d / 2.0) / sigma[k, i]).sum())
        losses.append(-math.log(prob + 1e-4))
    return float(np.mean(losses))


def _inputs(seed: int = 0, n: int = 9):
    rng = np.random.default_rng(seed)
    b = np.linspace(-1.0, 1.0, n)
    logits = rng.normal(size=(5, 3, n))
    sigma = rng.uniform(0.005, 0.1, size=(5, 3))
    v = rng.uniform(-1.2, 1.2, size=(5, 3))
    return logits, sigma, v, b


def test_loss_equals_direct_evaluation_of_rtmo_definition():
    logits, sigma, v, b = _inputs()
    span = 2.2
    got = rtmo_mle_loss(*(torch.from_numpy(a) for a in (logits, sigma, v, b)), span)
    assert float(got) == pytest.approx(_rtmo_direct(logits, sigma, v, b, span), rel=1e-10)


def test_kernel_is_a_laplace_density_up_to_rtmo_constant_4s():
    """∫ Σ_n π_n exp(−|v − b_n|/b)/σ dv = 4s: the per-axis likelihood is the Laplace-mixture density × 4s."""
    logits, sigma, _, b = _inputs(1)
    span = 2.0
    grid = np.linspace(-12.0, 12.0, 400_001)
    for k, i in [(0, 0), (2, 1), (4, 2)]:
        pi = np.exp(logits[k, i]) / np.exp(logits[k, i]).sum()
        scale = 2.0 * sigma[k, i] * span
        dens = (pi * np.exp(-np.abs(grid[:, None] - b) / scale)).sum(-1) / sigma[k, i]
        assert np.trapezoid(dens, grid) == pytest.approx(4.0 * span, rel=1e-6)


def test_floor_caps_an_outlier_and_gradients_stay_finite():
    n = 16
    centres = torch.linspace(-1, 1, n, dtype=torch.float64)
    logits = torch.zeros(2, 3, n, dtype=torch.float64, requires_grad=True)
    z = torch.tensor([[-40.0, 0.0, 40.0], [-5.0, 3.0, 0.0]], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([[50.0, -50.0, 0.0], [0.1, -0.2, 0.3]], dtype=torch.float64)
    loss = rtmo_mle_loss(logits, rtmo_sigma(z), v, centres, 2.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all() and torch.isfinite(z.grad).all()
    far = rtmo_mle_loss(logits[:1].detach(), rtmo_sigma(z[:1].detach()), v[:1], centres, 2.0)
    assert float(far) == pytest.approx(-math.log(RTMO_LIKELIHOOD_FLOOR), rel=1e-6)


def test_sigma_within_rtmo_bounds_in_head_and_model():
    z = torch.linspace(-200.0, 200.0, 2001, dtype=torch.float64)
    s = rtmo_sigma(z)
    assert float(s.min()) == pytest.approx(RTMO_SIGMA_MIN) and float(s.max()) <= RTMO_SIGMA_MAX
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=16, cov_head=True, uncertainty="B+C", velocity_range=2.0))
    with torch.no_grad():
        model.cov.linear.bias.fill_(1e3)
        out_hi = model(torch.randn(4, 100, 10))
        model.cov.linear.bias.fill_(-1e3)
        out_lo = model(torch.randn(4, 100, 10))
    assert torch.all(out_hi.rtmo_sigma <= RTMO_SIGMA_MAX) and torch.all(out_lo.rtmo_sigma >= RTMO_SIGMA_MIN)
    # the reported C variance is the Laplace kernel's 2b² with b = 2σ·2R
    torch.testing.assert_close(out_hi.var - out_hi.bin_var, laplace_variance(laplace_scale(out_hi.rtmo_sigma, 4.0)))


def test_bc_variance_is_the_variance_of_the_mixture_the_loss_fits():
    torch.manual_seed(1)
    r = 2.0
    model = VeloBinsNet(ModelConfig(num_bins=16, cov_head=True, uncertainty="B+C", velocity_range=r)).double()
    with torch.no_grad():
        out = model(torch.randn(2, 100, 10, dtype=torch.float64))
    grid = np.linspace(-30.0, 30.0, 600_001)
    centres = model.bins.centres.numpy()
    for k, i in [(0, 0), (1, 2)]:
        pi = torch.softmax(out.logits[k, i], -1).numpy()
        scale = float(laplace_scale(out.rtmo_sigma[k, i], 2 * r))
        dens = (pi * np.exp(-np.abs(grid[:, None] - centres) / scale) / (2 * scale)).sum(-1)
        mean = np.trapezoid(grid * dens, grid)
        var = np.trapezoid((grid - mean) ** 2 * dens, grid)
        assert mean == pytest.approx(float(out.v[k, i]), abs=1e-6)
        assert var == pytest.approx(float(out.var[k, i]), rel=1e-5)


def test_loss_decreases_on_a_tiny_synthetic_set():
    flight = make_flight(0, duration=4.0)
    x = torch.from_numpy(
        np.concatenate([flight.acc, flight.gyro, flight.rotor], axis=1)[
            np.arange(100)[None] + np.arange(0, 300, 10)[:, None]
        ]
    ).float()
    v = torch.from_numpy(flight.v[np.arange(0, 300, 10) + 99]).float()
    r = 1.1 * float(np.abs(flight.v).max())
    torch.manual_seed(0)
    model = VeloBinsNet(ModelConfig(num_bins=32, cov_head=True, velocity_range=r)).train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    variant, grid = parse_variant("M^B"), BinGrid(32, r)
    losses = []
    for _ in range(15):
        loss, _ = variant_loss(variant, model(x), v, grid, model.bins.centres)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] - 0.5, losses


def _old_m_checkpoint(tmp_path):
    """A checkpoint as the code before RTMO's loss wrote it for M^B: no ``cov.span`` in the state."""
    res = train(
        TrainConfig(model=ModelConfig(num_bins=16), variant="M^B", epochs=1, stride=20, progress=False),
        [make_flight(1, duration=3.0)],
        [make_flight(2, duration=2.0)],
        tmp_path / "run",
    )
    ck = read_checkpoint(res.last_path)
    assert "cov.span" in ck["model_state"]
    ck["model_state"] = {k: t for k, t in ck["model_state"].items() if k != "cov.span"}
    old = tmp_path / "old_m.pt"
    save_checkpoint(old, {k: val for k, val in ck.items() if k != "format_version"})
    return res.last_path, old


def test_new_m_checkpoint_loads_and_old_one_is_refused_in_one_line(tmp_path):
    new, old = _old_m_checkpoint(tmp_path)
    assert load_checkpoint(new).cov is not None
    with pytest.raises(CheckpointError, match="before RTMO's loss") as err:
        load_checkpoint(old)
    assert "\n" not in str(err.value)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "velobins_eval.cli",
            "export",
            "--checkpoint",
            str(old),
            "--format",
            "torchscript",
            "--out",
            str(tmp_path / "x.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "before RTMO's loss" in res.stderr
    with pytest.raises(ValueError, match="before RTMO's loss"):  # resume: the CLI's one-line user error
        train(
            TrainConfig(
                model=ModelConfig(num_bins=16), variant="M^B", epochs=2, stride=20, progress=False, resume=str(old)
            ),
            [make_flight(1, duration=3.0)],
            [make_flight(2, duration=2.0)],
            tmp_path / "run",
        )


def test_variant_loss_refuses_a_model_without_the_rtmo_head():
    model = VeloBinsNet(ModelConfig(num_bins=16, cov_head=True, velocity_range=2.0))
    out = model(torch.randn(2, 100, 10))._replace(rtmo_sigma=None)
    with pytest.raises(ValueError, match="no RTMO sigma head"):
        variant_loss(parse_variant("M^B"), out, torch.zeros(2, 3), BinGrid(16, 2.0), model.bins.centres)
