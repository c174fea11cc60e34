"""Error-conditioned Gaussian bin labels (§III-C, eq:errcond, eq:target, eq:tilt).

For each sample and axis, the label is the mass of N(v, σ²) over every bin's support
[b⁻_n, b⁺_n] (first/last edges at ∓R), renormalised, with σ = |v̂ − v| detached and clamped to
at least ``SIGMA_MIN_BIN_FRACTION`` × bin width. An exponential tilt q ← q·exp(η b)/Z̃ then makes
the label's mean exactly v (Csiszár I-projection): η solves m(η) = Σ q_η b = v, where m is
increasing in η (dm/dη = Var_η[b] > 0). We solve it per (sample, axis), vectorised, in float64,
with Newton steps safeguarded by a bracket (bisection / bracket expansion when Newton leaves it).

Targets outside the span of the centres [b_0, b_{N−1}] cannot be a mean of the bins; they are
clipped to it (with R = 1.1 × the training max this never happens on training data).
"""

from __future__ import annotations

import torch

from .bins import BinGrid
from .config import SIGMA_MIN_BIN_FRACTION

_TILT_TOL = 1e-11
"""Stop when |mean − v| < _TILT_TOL·R (far below the tested 1e-6·R)."""

_TILT_MAX_ITER = 200


def gaussian_bin_mass(v: torch.Tensor, sigma: torch.Tensor, grid: BinGrid) -> torch.Tensor:
    """(…,) v, σ → (…, N) normalised Gaussian mass over each bin's support (eq:target), float64.

    Uses the upper-tail form 1 − Φ where both edges are above v, so masses far in either tail
    keep full relative precision instead of cancelling to zero.
    """
    lower, upper = grid.edges(torch.float64)
    edges = torch.cat([lower, upper[-1:]]).to(v.device)  # N + 1 shared boundaries
    z = (edges - v.to(torch.float64).unsqueeze(-1)) / sigma.to(torch.float64).unsqueeze(-1)
    cdf = torch.special.ndtr(z)  # Φ at every boundary, once
    sf = torch.special.ndtr(-z)  # 1 − Φ, exact in the upper tail
    below = cdf[..., 1:] - cdf[..., :-1]
    above = sf[..., :-1] - sf[..., 1:]
    mass = torch.where(z[..., :-1] >= 0, above, below).clamp_min(0.0)
    return mass / mass.sum(-1, keepdim=True)


@torch.no_grad()
def tilt_to_mean(q: torch.Tensor, target: torch.Tensor, centres: torch.Tensor, scale: float) -> torch.Tensor:
    """Exponentially tilt q (…, N) so that Σ q b = target (eq:tilt); all float64.

    Args:
        q: (…, N) distributions.
        target: (…,) required means, inside (b_0, b_{N−1}).
        centres: (N,) bin centres b.
        scale: R, to work with the normalised coordinate u = b/R (η is solved in 1/R units).
    """
    u = centres.to(torch.float64) / scale
    t = target.to(torch.float64) / scale
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
    return p


@torch.no_grad()
def error_conditioned_labels(v_hat: torch.Tensor, v: torch.Tensor, grid: BinGrid) -> torch.Tensor:
    """Bin labels q (…, N) for predictions v̂ and targets v, each (…,) (§III-C).

    σ = |v̂ − v| (detached, eq:errcond), clamped at ``SIGMA_MIN_BIN_FRACTION`` × bin width; Gaussian
    bin mass (eq:target); exponential tilt so the mean is exactly v (eq:tilt). Returned in v's dtype.
    """
    centres = grid.centres(torch.float64).to(v.device)
    v64 = v.detach().to(torch.float64).clamp(float(centres[0]), float(centres[-1]))
    sigma = (v_hat.detach().to(torch.float64) - v64).abs().clamp_min(SIGMA_MIN_BIN_FRACTION * grid.width)
    q = gaussian_bin_mass(v64, sigma, grid)
    return tilt_to_mean(q, v64, centres, grid.velocity_range).to(v.dtype)
