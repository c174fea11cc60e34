"""Training losses (§III-D and the ablation of §V).

All losses return a scalar: the per-axis terms are summed over the three axes (eq:total_loss)
and averaged over the batch.

* Huber on the velocity error (eq:huber, δ = ``HUBER_DELTA``).
* KL(q‖π) to the error-conditioned labels (eq:kl).
* ``M``: RTMO-style mixture likelihood. RTMO's MLE loss scores the target under a distribution
  whose spread is learnt by a separate decoder. Our formulation: the density of the true
  velocity v under a mixture of Gaussians placed at the bin centres, weighted by the bin
  probabilities and sharing the covariance decoder's σ,
      p(v) = Σ_n π_n N(v; b_n, σ²),   L_M = −log p(v)
  computed stably with log-sum-exp over log π_n − (v − b_n)²/(2σ²) − log σ − ½ log 2π.
  It trains π (location) and σ (spread) jointly by maximum likelihood.
* Gaussian NLL for the regression baseline: ½ log 2π + log σ + (v − v̂)²/(2σ²) with σ from the
  log-σ head; AI-IO trains with Huber first and switches to this NLL (see train.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .bins import BinGrid
from .config import HUBER_DELTA, LAMBDA_HUBER, LAMBDA_KL
from .labels import error_conditioned_labels
from .model import NetOutput
from .variants import Variant

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def huber_loss(v_hat: torch.Tensor, v: torch.Tensor, delta: float = HUBER_DELTA) -> torch.Tensor:
    """eq:huber summed over axes, mean over batch; v_hat, v (B, 3)."""
    return F.huber_loss(v_hat, v, reduction="none", delta=delta).sum(-1).mean()


def kl_loss(q: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(q‖π) (eq:kl) with π = softmax(logits); q, logits (B, 3, N); 0·log 0 = 0."""
    log_pi = F.log_softmax(logits, dim=-1)
    log_q = torch.log(q.clamp_min(torch.finfo(q.dtype).tiny))
    return (q * (log_q - log_pi)).sum(-1).sum(-1).mean()


def mixture_nll(logits: torch.Tensor, log_sigma: torch.Tensor, v: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """−log Σ_n π_n N(v; b_n, σ²) (``M``, see module doc); logits (B, 3, N), log_sigma, v (B, 3)."""
    log_pi = F.log_softmax(logits, dim=-1)
    inv_var = torch.exp(-2.0 * log_sigma).unsqueeze(-1)
    log_kernel = -0.5 * (v.unsqueeze(-1) - centres).square() * inv_var
    log_p = torch.logsumexp(log_pi + log_kernel, dim=-1) - log_sigma - _HALF_LOG_2PI
    return -log_p.sum(-1).mean()


def gaussian_nll_sum_over_axes(v_hat: torch.Tensor, log_sigma: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Gaussian NLL with σ = exp(log σ), summed over the three axes, mean over the batch (regression baseline).

    The training loss (eq:total_loss sums per-axis terms); ``velobins_eval.metrics.gaussian_nll``
    is the evaluation metric, averaged over axes.
    """
    return (_HALF_LOG_2PI + log_sigma + 0.5 * (v - v_hat).square() * torch.exp(-2.0 * log_sigma)).sum(-1).mean()


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
        use_nll: regression baseline only: True once past the Huber warm-up epochs.
        label_fn: builds the KL labels (the straightforward benchmark baseline passes the
            reference solver of the tests).
    """
    terms: dict[str, torch.Tensor] = {}
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
            assert out.log_sigma is not None
            terms["mle"] = mixture_nll(out.logits, out.log_sigma, v, centres)
    total = torch.stack(list(terms.values())).sum()
    return total, {k: float(t.detach()) for k, t in terms.items()}
