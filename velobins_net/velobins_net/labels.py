"""Error-conditioned Gaussian bin labels (§III-C, eq:errcond, eq:target, eq:tilt).

For each sample and axis, the label is the mass of N(v, σ²) over every bin's support
[b⁻_n, b⁺_n] (first/last edges at ∓R), renormalised, with σ = |v̂ − v| detached and clamped to
at least ``SIGMA_MIN_BIN_FRACTION`` × bin width. An exponential tilt q ← q·exp(η b)/Z̃ then makes
the label's mean exactly v (Csiszár I-projection): η solves m(η) = Σ q_η b = v, where m is
increasing in η (dm/dη = Var_η[b] > 0). We solve it per (sample, axis), vectorised, in float64,
with Newton steps safeguarded by a bracket (bisection / bracket expansion when Newton leaves it),
iterating only the rows that have not converged yet.

Targets outside the span of the centres [b_0, b_{N−1}] cannot be a mean of the bins; they are
clipped to it (with R = 1.1 × the training max this never happens on training data).
"""

from __future__ import annotations

import torch

from .bins import BinGrid, bin_variance, expected_velocity
from .config import SIGMA_MIN_BIN_FRACTION

_TILT_TOL = 1e-11
"""Stop when |mean − v| < _TILT_TOL·R (far below the tested 1e-6·R)."""

_TILT_MAX_ITER = 200

_SQRT_HALF = 0.5**0.5


def gaussian_bin_mass(v: torch.Tensor, sigma: torch.Tensor, grid: BinGrid) -> torch.Tensor:
    """(…,) v, σ → (…, N) normalised Gaussian mass over each bin's support (eq:target), float64.

    One ``erfc`` call over the N + 1 shared edges: c = Φ(−|z|) is the smaller tail at each edge,
    accurate in both tails. A bin entirely above v has mass c_a − c_b (upper-tail difference), one
    entirely below has c_b − c_a (lower-tail difference), and the bin containing v has
    1 − c_a − c_b; so masses far in either tail keep full relative precision instead of cancelling.
    """
    lower, upper = grid.edges(torch.float64)
    edges = torch.cat([lower, upper[-1:]]).to(v.device)  # N + 1 shared boundaries
    z = (edges - v.to(torch.float64).unsqueeze(-1)) / sigma.to(torch.float64).unsqueeze(-1)
    # min(Φ(z), 1 − Φ(z)) at every boundary, once. Via erfc: torch.special.ndtr is 0.5·(1 + erf)
    # and loses the lower tail (ndtr(−8) is 2 % off, ndtr(−10) = 0).
    tail = 0.5 * torch.special.erfc(z.abs() * _SQRT_HALF)
    za, zb = z[..., :-1], z[..., 1:]
    ta, tb = tail[..., :-1], tail[..., 1:]
    mass = torch.where(za >= 0, ta - tb, torch.where(zb <= 0, tb - ta, 1.0 - ta - tb)).clamp_min(0.0)
    return mass / mass.sum(-1, keepdim=True)


@torch.no_grad()
def tilt_to_mean(q: torch.Tensor, target: torch.Tensor, centres: torch.Tensor, scale: float) -> torch.Tensor:
    """Exponentially tilt q (…, N) so that Σ q b = target (eq:tilt); all float64.

    Newton on m(η) = target per row, vectorised, safeguarded by a bracket (bisection / bracket
    expansion when Newton leaves it). Rows are dropped from the working set as soon as they
    converge, so the few hard rows (σ near its clamp, targets near the range ends) do not make
    every row iterate; η = 0 is tested first without a softmax (q is returned as is when its
    mean already matches, which is the common case for wide labels).

    Args:
        q: (…, N) distributions (each summing to one).
        target: (…,) required means, inside (b_0, b_{N−1}).
        centres: (N,) bin centres b.
        scale: R, to work with the normalised coordinate u = b/R (η is solved in 1/R units).
    """
    shape = q.shape
    q2 = q.to(torch.float64).reshape(-1, shape[-1])
    out = q2.clone()
    u = centres.to(q2.device, torch.float64) / scale
    t = target.to(torch.float64).reshape(-1) / scale
    f = expected_velocity(q2, u) - t
    rows = torch.nonzero(f.abs() >= _TILT_TOL).squeeze(1)
    if rows.numel() == 0:
        return out.reshape(shape)
    logq = torch.log(q2[rows])
    t, f, p = t[rows], f[rows], q2[rows]
    eta = torch.zeros_like(t)
    lo = torch.full_like(t, -torch.inf)
    hi = torch.full_like(t, torch.inf)
    for _ in range(_TILT_MAX_ITER):
        m = f + t
        var = bin_variance(p, u, m)  # dm/dη = Var_η[b]
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
        eta = torch.where(ok, newton, fallback)
        p = torch.softmax(logq + eta.unsqueeze(-1) * u, dim=-1)
        f = expected_velocity(p, u) - t
        done = f.abs() < _TILT_TOL
        if bool(done.all()):
            break
        if bool(done.any()):
            out[rows[done]] = p[done]
            keep = ~done
            rows, logq, t, f, p, eta, lo, hi = (a[keep] for a in (rows, logq, t, f, p, eta, lo, hi))
    out[rows] = p
    return out.reshape(shape)


@torch.no_grad()
def error_conditioned_labels(
    v_hat: torch.Tensor, v: torch.Tensor, grid: BinGrid, floor: torch.Tensor | None = None
) -> torch.Tensor:
    """Bin labels q (…, N) for predictions v̂ and targets v, each (…,) (§III-C).

    σ = |v̂ − v| (detached, eq:errcond), clamped at ``SIGMA_MIN_BIN_FRACTION`` × bin width; Gaussian
    bin mass (eq:target); exponential tilt so the mean is exactly v (eq:tilt). Returned in v's dtype.

    ``floor`` (broadcast against v, e.g. (3,) per axis) [m/s] is a lower bound on σ, an option beyond the
    paper: on a few minutes of flights the training error falls far below the error on new flights within an
    epoch, and labels as narrow as the training error teach the bins a spread (and a sharpness) that new
    flights do not have. ``velobins train --label-floor val`` passes the last validation's per-axis RMS error.
    """
    centres = grid.centres(torch.float64).to(v.device)
    v64 = v.detach().to(torch.float64).clamp(float(centres[0]), float(centres[-1]))
    sigma = (v_hat.detach().to(torch.float64) - v64).abs().clamp_min(SIGMA_MIN_BIN_FRACTION * grid.width)
    if floor is not None:
        sigma = torch.maximum(sigma, floor.to(sigma))
    q = gaussian_bin_mass(v64, sigma, grid)
    return tilt_to_mean(q, v64, centres, grid.velocity_range).to(v.dtype)
