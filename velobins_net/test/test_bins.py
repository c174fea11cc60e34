"""Velocity bins (§III-A): grid, edges, range from the training set, decoding (eq:decode, eq:bin_variance)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reference import accelerator

from velobins_net.bins import BinGrid, bin_variance, decode, decode_queries, expected_velocity, velocity_range_from


def test_decode_matches_definitions():
    rng = np.random.default_rng(1)
    b = np.linspace(-2, 2, 11)
    p = rng.dirichlet(np.ones(11), size=(5, 3))
    v = expected_velocity(torch.from_numpy(p), torch.from_numpy(b))
    var = bin_variance(torch.from_numpy(p), torch.from_numpy(b), v)
    v2, var2 = decode(torch.from_numpy(np.log(p)), torch.from_numpy(b))
    np.testing.assert_allclose(v2.numpy(), v.numpy(), rtol=1e-12)
    np.testing.assert_allclose(var2.numpy(), var.numpy(), rtol=1e-12)
    v_ref = (p * b).sum(-1)
    var_ref = (p * (b - v_ref[..., None]) ** 2).sum(-1)
    np.testing.assert_allclose(v.numpy(), v_ref, rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), var_ref, rtol=1e-12)


def test_decode_queries_natively_and_in_pytorch_agree():
    g = torch.Generator().manual_seed(2)
    queries, features_t = torch.randn(4, 3, 8, generator=g), torch.randn(8, 40, generator=g).contiguous()
    centres = BinGrid(40, 2.0).centres()
    with torch.no_grad():
        fast = decode_queries(queries, features_t, centres)
        with accelerator(False):
            plain = decode_queries(queries, features_t, centres)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert fast[0].shape == (4, 3, 40) and fast[1].shape == fast[2].shape == (4, 3)


def test_bin_grid_edges_and_range():
    g = BinGrid(8, 2.0)
    c = g.centres(torch.float64)
    lo, hi = g.edges()
    assert lo[0] == -2.0 and hi[-1] == 2.0
    torch.testing.assert_close(hi[:-1], 0.5 * (c[1:] + c[:-1]))
    torch.testing.assert_close(lo[1:], hi[:-1])
    assert g.width == pytest.approx(0.5)
    v = [np.array([[0.5, -3.0, 1.0]]), np.array([[2.0, 0.0, 0.1]])]
    assert velocity_range_from(v) == pytest.approx(1.1 * 3.0)
    with pytest.raises(ValueError, match="array 0"):
        velocity_range_from([np.zeros((3, 2))])
