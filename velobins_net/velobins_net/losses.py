"""Training losses (§III-D and the ablation of §V).

All losses return a scalar: the per-axis terms are summed over the three axes (eq:total_loss)
and averaged over the batch.

* Huber on the velocity error (eq:huber, δ = ``HUBER_DELTA``).
* KL(q‖π) to the error-conditioned labels (eq:kl).
* ``M``: RTMO's maximum-likelihood loss (Lu et al. 2024, mmpose ``MLECCLoss`` with the target
  of ``DCC.generate_target_heatmap``), :func:`rtmo_mle_loss`. Per axis i, the likelihood of the
  true velocity under the bin mixture with RTMO's Laplace kernel and 1/σ normalisation,
      p_i = Σ_n π_{i,n} exp(−|v_i − b_n| / b_i) / σ_i,   b_i = 2σ_i·2R,
  σ_i ∈ [10⁻³, 0.1) from the M head's sigmoid (:func:`velobins_net.decoders.rtmo_sigma`); the
  axes are RTMO's coordinates of one point, so their likelihoods multiply, with RTMO's floor
  ε = 10⁻⁴: L_M = −log(Π_i p_i + ε), mean over the batch. Replaces the earlier Gaussian kernel
  with an unbounded log-σ head (docs/design.md, "M: RTMO's MLE loss").
* Gaussian NLL for the regression baseline: ½ log 2π + log σ + (v − v̂)²/(2σ²) with σ from the
  log-σ head; AI-IO trains with Huber first and switches to this NLL (see train.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from velobins_common.stats import HALF_LOG_2PI

from .bins import BinGrid
from .config import HUBER_DELTA, LAMBDA_HUBER, LAMBDA_KL, MIN_LOG_STD
from .decoders import LEGACY_M_CHECKPOINT, laplace_scale
from .labels import error_conditioned_labels
from .model import NetOutput
from .variants import Variant

RTMO_LIKELIHOOD_FLOOR = 1e-4
"""ε of RTMO's ``MLECCLoss`` (mode 'log'): −log(prob + 1e-4), which caps an outlier's loss."""


def huber_loss(v_hat: torch.Tensor, v: torch.Tensor, delta: float = HUBER_DELTA) -> torch.Tensor:
    """eq:huber summed over axes, mean over batch; v_hat, v (B, 3)."""
    return F.huber_loss(v_hat, v, reduction="none", delta=delta).sum(-1).mean()


def kl_loss(q: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(q‖π) (eq:kl) with π = softmax(logits); q, logits (B, 3, N); 0·log 0 = 0."""
    log_pi = F.log_softmax(logits, dim=-1)
    log_q = torch.log(q.clamp_min(torch.finfo(q.dtype).tiny))
    return (q * (log_q - log_pi)).sum(-1).sum(-1).mean()


def rtmo_mle_loss(
    logits: torch.Tensor, sigma: torch.Tensor, v: torch.Tensor, centres: torch.Tensor, span: float
) -> torch.Tensor:
    """RTMO's MLE loss on the bins (``M``, see module doc): −log(Π_i Σ_n π_{i,n} k_{i,n} + ε), batch mean.

    k_{i,n} = exp(−|v_i − b_n| / b_i) / σ_i, b_i = laplace_scale(σ_i, span): RTMO's target heatmap
    (mmpose ``rtmo_head.py`` ``DCC.generate_target_heatmap``: exp(−d/2)/σ with d = |t − b_n|/(s·σ)),
    scored against π as ``MLECCLoss`` does ((o * t).sum over bins, product over coordinates).
    Computed in log space (log-sum-exp over bins, log-add-exp with log ε), so no underflow.

    Args:
        logits: (B, 3, N) bin logits; π = softmax.
        sigma: (B, 3) RTMO's σ from the M head, already bounded to [10⁻³, 0.1).
        v: (B, 3) true velocity [m/s].
        centres: (N,) bin centres b_n [m/s].
        span: normalising length s [m/s], the bin span 2R.
    """
    log_pi = F.log_softmax(logits, dim=-1)
    scale = laplace_scale(sigma, span).unsqueeze(-1)
    log_kernel = -(v.unsqueeze(-1) - centres).abs() / scale - torch.log(sigma).unsqueeze(-1)
    log_p = torch.logsumexp(log_pi + log_kernel, dim=-1).sum(-1)
    floor = torch.full_like(log_p, math.log(RTMO_LIKELIHOOD_FLOOR))
    return -torch.logaddexp(log_p, floor).mean()


def gaussian_nll_sum_over_axes(v_hat: torch.Tensor, log_sigma: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL with σ = exp(log σ), summed over the three axes, mean over the batch (regression baseline).

    The training loss (eq:total_loss sums per-axis terms); ``velobins_common.stats.gaussian_nll``
    is the evaluation metric, averaged over axes.
    """
    log_sigma = log_sigma.clamp_min(MIN_LOG_STD)  # AI-IO's (and TLIO's) floor: no gradient below σ = 1 mm/s
    return (HALF_LOG_2PI + log_sigma + 0.5 * (v - v_hat).square() * torch.exp(-2.0 * log_sigma)).sum(-1).mean()


LabelFn = Callable[[torch.Tensor, torch.Tensor, BinGrid], torch.Tensor]
"""Signature of a label builder: (v̂, v, grid) → q (§III-C)."""


def variant_loss(
    variant: Variant,
    out: NetOutput,
    v: torch.Tensor,
    grid: BinGrid,
    centres: torch.Tensor,
    use_nll: bool = False,
    label_fn: LabelFn = error_conditioned_labels,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Total training loss of a variant and its named terms (for logging).

    Args:
        variant: the parsed variant.
        out: network outputs for the batch.
        v: (B, 3) target body velocity.
        grid: bin grid (labels).
        centres: (N,) bin centres on the model's device.
        use_nll: regression baseline and Table I baselines: True once past the warm-up epochs
            (Huber, or the baseline's own first phase).
        label_fn: builds the KL labels (the straightforward benchmark baseline passes the
            reference solver of the tests).
    """
    terms: dict[str, torch.Tensor] = {}
    if variant.is_baseline:
        raise ValueError(f"variant {variant.name}: a baseline's loss is velobins_net.networks.training_loss's")
    if variant.is_regression:
        assert out.log_sigma is not None
        if use_nll:
            terms["nll"] = gaussian_nll_sum_over_axes(out.v, out.log_sigma, v)
        else:
            # 0·Σ log σ keeps the (not yet trained) σ head in the graph, as DDP requires.
            terms["huber"] = huber_loss(out.v, v) + 0.0 * out.log_sigma.sum()
    else:
        assert out.logits is not None
        if variant.uses_huber:
            terms["huber"] = LAMBDA_HUBER * huber_loss(out.v, v)
        if variant.uses_kl:
            q = label_fn(out.v, v, grid).to(out.logits.dtype)
            terms["kl"] = LAMBDA_KL * kl_loss(q, out.logits)
        if variant.uses_mixture:
            if out.rtmo_sigma is None:
                raise ValueError(f"variant {variant.name}: the model has no RTMO sigma head ({LEGACY_M_CHECKPOINT})")
            terms["mle"] = rtmo_mle_loss(out.logits, out.rtmo_sigma, v, centres, 2.0 * grid.velocity_range)
    total = torch.stack(list(terms.values())).sum()
    return total, {k: float(t.detach()) for k, t in terms.items()}
