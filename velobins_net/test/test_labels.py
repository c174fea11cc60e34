"""Error-conditioned Gaussian labels: exact mean (tilt), normalisation, width, σ clamp."""

from __future__ import annotations

import torch
from reference import reference_error_conditioned_labels

from velobins_net.bins import BinGrid
from velobins_net.labels import error_conditioned_labels, gaussian_bin_mass

torch.set_num_threads(1)
R = 4.0
GRID = BinGrid(256, R)
B = GRID.centres(torch.float64)


def _moments(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = q @ B
    return m, ((q * (B - m.unsqueeze(-1)) ** 2).sum(-1)).sqrt()


def test_label_mean_is_exact_sums_to_one_incl_edges_and_tiny_sigma():
    g = torch.Generator().manual_seed(0)
    v = (torch.rand(3000, generator=g, dtype=torch.float64) * 2 - 1) * float(B[-1])
    v[:6] = torch.tensor([B[-1] - 1e-7, B[0] + 1e-7, B[-1] - 0.3 * GRID.width, B[0] + 0.01, B[100], 0.0])
    err = torch.randn(3000, generator=g, dtype=torch.float64) * torch.logspace(-7, 0.3, 3000, dtype=torch.float64)
    q = error_conditioned_labels(v + err, v, GRID)
    m, _ = _moments(q)
    assert (m - v).abs().max() < 1e-6 * R
    assert (q.sum(-1) - 1).abs().max() < 1e-12
    assert (q >= 0).all()


def test_tilt_fixes_the_discretisation_bias():
    v = torch.tensor([B[10] + 0.37 * GRID.width], dtype=torch.float64)
    raw = gaussian_bin_mass(v, torch.tensor([0.1 * GRID.width], dtype=torch.float64), GRID)
    assert abs(float(raw @ B) - float(v)) > 1e-3 * GRID.width  # untilted mass is biased
    q = error_conditioned_labels(v + 1e-9, v, GRID)
    assert abs(float(q @ B) - float(v)) < 1e-10


def test_label_std_tracks_error_when_wide():
    v = torch.tensor([0.3, -1.0, 1.2], dtype=torch.float64)
    sigma = torch.tensor([10, 15, 20], dtype=torch.float64) * GRID.width
    q = error_conditioned_labels(v + sigma, v, GRID)
    _, std = _moments(q)
    torch.testing.assert_close(std, sigma, rtol=0.02, atol=0.0)


def test_a_floor_widens_only_the_labels_narrower_than_it():
    """``floor`` (per axis, broadcast) bounds σ below: a small error gets labels as wide as the floor, a larger
    one keeps its own width, and the mean stays exactly v."""
    v = torch.tensor([[0.3, -1.0, 1.2], [0.3, -1.0, 1.2]], dtype=torch.float64)
    err = torch.tensor([[0.01, 0.01, 0.01], [0.6, 0.6, 0.6]], dtype=torch.float64)
    floor = torch.tensor([0.2, 0.3, 0.4], dtype=torch.float64)
    q = error_conditioned_labels(v + err, v, GRID, floor=floor)
    m, std = _moments(q)
    torch.testing.assert_close(std[0], floor, rtol=0.02, atol=0.0)
    torch.testing.assert_close(std[1], err[1], rtol=0.02, atol=0.0)
    assert (m - v).abs().max() < 1e-6 * R
    _, narrow = _moments(error_conditioned_labels(v + err, v, GRID))
    assert (narrow[0] < 0.05).all()  # without the floor the first row stays as narrow as its error


def test_sigma_is_clamped_at_a_tenth_of_a_bin():
    v = torch.tensor([B[50] + 0.5 * GRID.width], dtype=torch.float64)  # on a bin edge
    q = error_conditioned_labels(v.clone(), v, GRID)  # zero error → σ = 0.1 width
    # a clamped label spreads over the two bins around the edge, nothing NaN
    assert torch.isfinite(q).all()
    assert q[0, 50] > 0.4 and q[0, 51] > 0.4


def test_labels_carry_no_gradient_and_keep_dtype():
    v_hat = torch.zeros(2, 3, requires_grad=True)
    v = torch.tensor([[0.1, 0.2, -0.3], [1.0, 0.0, 2.0]])
    q = error_conditioned_labels(v_hat, v, GRID)
    assert q.shape == (2, 3, 256) and q.dtype == torch.float32 and not q.requires_grad


def test_gaussian_bin_mass_matches_phi_differences_and_keeps_tail_precision():
    v = torch.tensor([0.37, -1.1], dtype=torch.float64)
    sigma = torch.tensor([0.05, 0.3], dtype=torch.float64)
    lo, hi = GRID.edges(torch.float64)
    za = (lo - v.unsqueeze(-1)) / sigma.unsqueeze(-1)
    zb = (hi - v.unsqueeze(-1)) / sigma.unsqueeze(-1)
    # upper-tail form via erfc is exact for far bins on both sides (erfc(−x) = 2 − erfc(x) only near 0)
    sf = lambda z: 0.5 * torch.special.erfc(z / 2**0.5)  # noqa: E731
    ref = torch.where(za >= 0, sf(za) - sf(zb), sf(-zb) - sf(-za))
    ref = ref / ref.sum(-1, keepdim=True)
    got = gaussian_bin_mass(v, sigma, GRID)
    kept = ref > 1e-290  # (differences of subnormal tails below)
    torch.testing.assert_close(got[kept], ref[kept], rtol=1e-9, atol=0.0)
    assert 0 < got[0, 85] < 1e-200 and 0 < got[0, 175] < 1e-90  # ±25..34 σ: tiny, not cancelled to 0


def test_rows_already_centred_are_returned_untilted():
    v = B[[40, 41, 100]].clone()  # bin centres: the symmetric Gaussian mass already has mean v
    sigma = torch.full_like(v, 3 * GRID.width)
    q = error_conditioned_labels(v + sigma, v, GRID)
    torch.testing.assert_close(q, gaussian_bin_mass(v, sigma, GRID), rtol=0, atol=0)


def test_labels_equal_the_straightforward_solver():
    """The active-set solver and the oracle (every row iterated, two erfc calls) give the same labels."""
    grid = BinGrid(128, 3.0)
    gen = torch.Generator().manual_seed(3)
    v = (torch.rand(64, 3, generator=gen, dtype=torch.float64) * 2 - 1) * 2.9
    v_hat = v + torch.randn(64, 3, generator=gen, dtype=torch.float64) * torch.logspace(-3, 0, 3, dtype=torch.float64)
    torch.testing.assert_close(
        error_conditioned_labels(v_hat, v, grid), reference_error_conditioned_labels(v_hat, v, grid), rtol=0, atol=1e-9
    )
