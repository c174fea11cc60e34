"""Training losses of the baselines, per method and phase (scalar: summed over axes, mean over the batch).

=======  ===============================================  ==============================================
method   warm-up (``use_nll=False``)                      second phase (``use_nll=True``)
=======  ===============================================  ==============================================
tlio     MSE (TLIO ``loss_mse``, first 10 epochs)         diagonal Gaussian NLL of log σ (``loss_distribution_diag``)
eqnio    MSE (EqNIO ``get_loss``, first 10 epochs)        full-covariance Gaussian NLL of Σ = F Σ_c Fᵀ
imo      Huber δ = 0.5 m (IMO's only loss)                diagonal Gaussian NLL (our σ head, see imo.py)
airio    AirIO's single loss, both phases (no warm-up): 100·[Huber δ = 0.005 + 1e-4·(e²/σ² + log σ²)]
=======  ===============================================  ==============================================

The originals average over the 3 axes too; summing instead only scales the loss by 3 (the suite's
convention, :mod:`velobins_net.losses`). During warm-up the σ head stays in the graph with weight 0
(DDP needs a gradient for every parameter). log σ arrives already clamped by the model (TLIO's
log 1e-3 floor).
"""

from __future__ import annotations

import torch

from velobins_common.stats import HALF_LOG_2PI

from ..config import BASELINE_METHODS
from ..losses import gaussian_nll_sum_over_axes, huber_loss
from ..model import NetOutput

IMO_HUBER_DELTA = 0.5
"""[m] IMO's Huber δ on the displacement (``huber_pos_loss_delta``)."""

AIRIO_WEIGHT = 100.0
"""AirIO's loss weight (``train.weight: 1e2``)."""

AIRIO_HUBER_DELTA = 0.005
"""[m/s] AirIO's Huber δ (loss ``Huber_loss005``)."""

AIRIO_COV_WEIGHT = 1e-4
"""AirIO's weight of the covariance term (``train.cov_weight``)."""


def mse_sum_over_axes(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Squared error summed over axes, mean over the batch; pred, target (B, 3)."""
    return (pred - target).square().sum(-1).mean()


def full_covariance_nll(pred: torch.Tensor, cov: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL ½ eᵀΣ⁻¹e + ½ log det Σ + (3/2) log 2π, mean over the batch; cov (B, 3, 3) SPD."""
    chol = torch.linalg.cholesky(cov)
    e = (target - pred).unsqueeze(-1)
    z = torch.linalg.solve_triangular(chol, e, upper=False)
    log_det = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    return (0.5 * z.square().sum((-2, -1)) + 0.5 * log_det + 3.0 * HALF_LOG_2PI).mean()


def airio_loss(pred: torch.Tensor, log_sigma: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """AirIO: weight · [Huber(δ) + w_cov · Σ_axes (e²/σ² + log σ²)], e not detached (``covaug``)."""
    e2 = (pred - target).square()
    cov_term = (e2 * torch.exp(-2.0 * log_sigma) + 2.0 * log_sigma).sum(-1).mean()
    return AIRIO_WEIGHT * (huber_loss(pred, target, delta=AIRIO_HUBER_DELTA) + AIRIO_COV_WEIGHT * cov_term)


def baseline_loss(method: str, out: NetOutput, y: torch.Tensor, use_nll: bool) -> torch.Tensor:
    """Training loss of a baseline (table in the module doc).

    Args:
        method: ``tlio``, ``eqnio``, ``imo`` or ``airio``.
        out: the model's output (``v`` displacement or body velocity, ``log_sigma``, EqNIO's ``cov``).
        y: (B, 3) target: displacement in the window start's yaw frame [m], or AirIO's body velocity [m/s].
        use_nll: False during the method's warm-up, True afterwards.
    """
    if method not in BASELINE_METHODS:
        raise ValueError(f"baseline_loss: method must be one of {BASELINE_METHODS}, got {method!r}")
    if out.log_sigma is None:
        raise ValueError(f"baseline_loss: {method} output has no log_sigma")
    if method == "airio":
        return airio_loss(out.v, out.log_sigma, y)
    if not use_nll:
        base = huber_loss(out.v, y, delta=IMO_HUBER_DELTA) if method == "imo" else mse_sum_over_axes(out.v, y)
        return base + 0.0 * out.log_sigma.sum()
    if method == "eqnio":
        if out.cov is None:
            raise ValueError("baseline_loss: eqnio output has no cov")
        return full_covariance_nll(out.v, out.cov, y)
    return gaussian_nll_sum_over_axes(out.v, out.log_sigma, y)
