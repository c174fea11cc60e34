"""The Table I baselines (velobins_net.baselines): output contract, frames, invariance/equivariance, losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from velobins_common.constants import STANDARD_GRAVITY
from velobins_ekf.displacement import frame_rotation
from velobins_net.baselines import AirIONet, EqNIONet, IMONet, TLIONet, baseline_loss, build
from velobins_net.baselines.frames import (
    displacement_target,
    gravity_aligned,
    so3_log,
    split_window,
    yaw_rotation,
)
from velobins_net.baselines.losses import full_covariance_nll
from velobins_net.config import ModelConfig
from velobins_net.losses import gaussian_nll_sum_over_axes

METHODS = ("tlio", "eqnio", "imo", "airio")
K = 4
T = 100


def config(method: str, rotor_kind: str = "command") -> ModelConfig:
    return ModelConfig(method=method, head="reg", uncertainty="C", num_rotors=K, rotor_kind=rotor_kind)


def small(method: str, rotor_kind: str = "command") -> torch.nn.Module:
    """Narrow versions (same architecture) so the tests stay fast."""
    cfg = config(method, rotor_kind)
    if method == "tlio":
        return TLIONet(cfg, base_width=8)
    if method == "eqnio":
        return EqNIONet(cfg, base_width=8, hidden=8, depth=1, kernel=5)
    if method == "imo":
        return IMONet(cfg, channels=(16, 16, 16, 16))
    return AirIONet(cfg, channels=(8, 16))


def random_rotations(n: int, seed: int) -> np.ndarray:
    return Rotation.random(n, random_state=seed).as_matrix()


def smooth_window(batch: int, seed: int) -> torch.Tensor:
    """Raw windows with a slowly turning attitude (tilt < ~30°, any yaw) and plausible IMU/rotor values."""
    rng = np.random.default_rng(seed)
    t = np.arange(T) / 100.0
    x = np.zeros((batch, T, 6 + K + 9))
    for b in range(batch):
        yaw = rng.uniform(-np.pi, np.pi) + rng.normal(0, 1.0) * t
        roll = 0.3 * np.sin(2 * np.pi * rng.uniform(0.2, 1.0) * t + rng.uniform(0, 6))
        pitch = 0.3 * np.sin(2 * np.pi * rng.uniform(0.2, 1.0) * t + rng.uniform(0, 6))
        rot = Rotation.from_euler("ZYX", np.stack([yaw, pitch, roll], 1)).as_matrix()
        x[b, :, 0:3] = rng.normal(0, 1.0, (T, 3)) + np.array([0, 0, 9.81])
        x[b, :, 3:6] = rng.normal(0, 0.5, (T, 3))
        x[b, :, 6 : 6 + K] = rng.uniform(0.3, 0.7, (T, K))
        x[b, :, 6 + K :] = rot.reshape(T, 9)
    return torch.tensor(x, dtype=torch.float32)


# ----------------------------------------------------------------------------- output contract


@pytest.mark.parametrize("method", METHODS)
def test_output_contract(method: str) -> None:
    torch.manual_seed(0)
    net = small(method)
    x = smooth_window(5, seed=1)
    out = net(x)
    for name in ("v", "var", "log_sigma"):
        value = getattr(out, name)
        assert value.shape == (5, 3) and value.dtype == torch.float32, name
        assert torch.isfinite(value).all(), name
    assert out.logits is None and out.bin_var is None and out.rtmo_sigma is None
    assert (out.var > 0).all()
    if method == "eqnio":
        assert out.cov is not None and out.cov.shape == (5, 3, 3)
        torch.testing.assert_close(out.var, torch.diagonal(out.cov, dim1=-2, dim2=-1))
        torch.testing.assert_close(out.cov, out.cov.transpose(1, 2))
        assert (torch.linalg.eigvalsh(out.cov.double()) > 0).all()
        # the canonical-frame σ's are the eigenvalues of the covariance
        torch.testing.assert_close(
            torch.linalg.eigvalsh(out.cov).sort(-1).values, torch.exp(2 * out.log_sigma).sort(-1).values
        )
    else:
        assert out.cov is None
        torch.testing.assert_close(out.var, torch.exp(2 * out.log_sigma))
    assert net.cfg.method == method
    with torch.inference_mode():
        net.eval()
        assert net(x, uncertainty="C").v.shape == (5, 3)
    with pytest.raises(ValueError, match="uncertainty"):
        net(x, uncertainty="B")
    with pytest.raises(ValueError):
        net(x[:, :, :-1])


@pytest.mark.parametrize("method", METHODS)
def test_normalization_is_state(method: str) -> None:
    net = small(method, rotor_kind="speed")
    mean, std = torch.arange(6.0 + K), torch.full((6 + K,), 2.0)
    net.set_normalization(mean, std)
    state = net.state_dict()
    torch.testing.assert_close(state["norm_mean"], mean)
    torch.testing.assert_close(state["norm_std"], std)
    with pytest.raises(ValueError):
        net.set_normalization(mean[:-1], std[:-1])
    with pytest.raises(ValueError):
        net.set_normalization(mean, -std)
    net.invalidate_cache()


def test_build_makes_each_method_with_published_widths() -> None:
    classes = {"tlio": TLIONet, "eqnio": EqNIONet, "imo": IMONet, "airio": AirIONet}
    for method, cls in classes.items():
        net = build(config(method))
        assert type(net) is cls and net.cfg.method == method
    assert build(config("tlio")).backbone.input_block[0].out_channels == 64  # TLIO's base_plane
    with pytest.raises(ValueError):
        build(ModelConfig())
    with pytest.raises(ValueError):
        TLIONet(config("imo"))


# ----------------------------------------------------------------------------- frames


def test_gravity_aligned_matches_scipy() -> None:
    rot = random_rotations(2 * 7, seed=3).reshape(2, 7, 3, 3)
    body = np.random.default_rng(4).normal(size=(2, 7, 3))
    got = gravity_aligned(torch.tensor(rot), torch.tensor(body)).numpy()
    for b in range(2):
        yaw = Rotation.from_matrix(rot[b, 0]).as_euler("ZYX")[0]  # independent ZYX yaw
        rz = Rotation.from_euler("z", yaw).as_matrix()
        expected = np.stack([rz.T @ rot[b, t] @ body[b, t] for t in range(7)])
        np.testing.assert_allclose(got[b], expected, atol=1e-10)


def test_displacement_target_is_the_ekf_measurement_model() -> None:
    rot = random_rotations(6, seed=5)
    rng = np.random.default_rng(6)
    p0, p1 = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    got = displacement_target(torch.tensor(p0), torch.tensor(p1), torch.tensor(rot)).numpy()
    expected = np.stack([frame_rotation(rot[i], True) @ (p1[i] - p0[i]) for i in range(6)])
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_split_window_reads_r_row_major() -> None:
    x = smooth_window(2, seed=7)
    acc, gyro, rotor, rot = split_window(x, K)
    assert acc.shape == gyro.shape == (2, T, 3) and rotor.shape == (2, T, K) and rot.shape == (2, T, 3, 3)
    assert float(rot[0, 0, 0, 1]) == float(x[0, 0, 6 + K + 1])  # R[0, 1] is the 2nd attitude channel


def test_so3_log_matches_scipy_rotvec() -> None:
    rots = [random_rotations(200, seed=8)]
    axis = np.random.default_rng(9).normal(size=(20, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    for angle in (0.0, 1e-8, 1e-4, math.pi - 1e-3, math.pi - 1e-7):
        rots.append(Rotation.from_rotvec(axis * angle).as_matrix())
    rot = np.concatenate(rots)
    got = so3_log(torch.tensor(rot)).numpy()
    # the same rotation back (rotation vectors at ±π are both valid)
    np.testing.assert_allclose(Rotation.from_rotvec(got).as_matrix(), rot, atol=1e-6)
    small_angle = np.linalg.norm(got, axis=1) < math.pi - 1e-2
    np.testing.assert_allclose(got[small_angle], Rotation.from_matrix(rot[small_angle]).as_rotvec(), atol=1e-9)


# ----------------------------------------------------------------------------- invariance / equivariance


def world_yaw(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """The same window seen in a world frame turned by ``alpha`` about z: R → R_z(α) R."""
    x = x.clone()
    rot = x[..., 6 + K :].reshape(*x.shape[:2], 3, 3)
    rz = yaw_rotation(torch.tensor(alpha, dtype=x.dtype))
    x[..., 6 + K :] = (rz @ rot).reshape(*x.shape[:2], 9)
    return x


@pytest.mark.parametrize("method", ("tlio", "eqnio", "imo"))
def test_displacement_methods_are_world_yaw_invariant(method: str) -> None:
    torch.manual_seed(1)
    net = small(method).double().eval()
    x = smooth_window(3, seed=10).double()
    x2 = world_yaw(x, 1.234)
    assert not torch.allclose(x, x2)
    if method != "eqnio":
        torch.testing.assert_close(net.features(x), net.features(x2))
    torch.testing.assert_close(net(x).v, net(x2).v)


def test_eqnio_is_so2_equivariant() -> None:
    torch.manual_seed(2)
    net = small("eqnio").double().eval()
    x = smooth_window(4, seed=11).double()
    acc, gyro, _, rot = split_window(x, K)
    ga_acc, ga_gyro = gravity_aligned(rot, acc), gravity_aligned(rot, gyro)
    for alpha in (0.7, -2.5, math.pi):
        rz = yaw_rotation(torch.tensor(alpha, dtype=torch.float64))
        r_acc, r_gyro = ga_acc @ rz.T, ga_gyro @ rz.T
        assert (r_acc - ga_acc).abs().max() > 0.1  # the network input really changes
        d, cov, log_sigma, frame = net.forward_aligned(ga_acc, ga_gyro)
        d2, cov2, log_sigma2, frame2 = net.forward_aligned(r_acc, r_gyro)
        torch.testing.assert_close(d2, d @ rz.T, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(cov2, rz @ cov @ rz.T, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(log_sigma2, log_sigma, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(frame2, rz @ frame, atol=1e-4, rtol=1e-4)
        assert torch.allclose(torch.linalg.det(frame), torch.ones(4, dtype=torch.float64))


# ----------------------------------------------------------------------------- inputs that must be used


def test_airio_uses_attitude_and_body_imu() -> None:
    torch.manual_seed(3)
    net = small("airio").eval()
    x = smooth_window(3, seed=12)
    base = net(x).v
    other_attitude = world_yaw(x, 0.8)  # same body IMU, another attitude
    assert (net(other_attitude).v - base).abs().max() > 1e-5
    other_imu = x.clone()
    other_imu[..., 0:6] += torch.randn_like(other_imu[..., 0:6])
    assert (net(other_imu).v - base).abs().max() > 1e-5
    assert torch.equal(net.features(other_attitude)[0], net.features(x)[0])  # body frame: not rotated


def test_imo_thrust_proxy_and_rotor_use() -> None:
    torch.manual_seed(4)
    net = small("imo", rotor_kind="speed").eval()
    mean = torch.cat([torch.zeros(6), torch.full((K,), 4.0e6)])  # ω² statistics
    net.set_normalization(mean, torch.ones(6 + K))
    assert math.isclose(float(net.thrust_scale), STANDARD_GRAVITY / (K * 4.0e6), rel_tol=1e-6)
    x = smooth_window(2, seed=13)
    x[..., 6 : 6 + K] = 2000.0  # rad/s, at the training mean of ω²: thrust = g along body z
    feat = net.features(x)
    _, _, _, rot = split_window(x, K)
    expected = STANDARD_GRAVITY * gravity_aligned(rot, torch.tensor([0.0, 0.0, 1.0]).expand(2, T, 3))
    torch.testing.assert_close(feat[:, 3:].transpose(1, 2), expected, atol=1e-4, rtol=1e-4)
    faster = x.clone()
    faster[..., 6 : 6 + K] = 2500.0
    assert (net(faster).v - net(x).v).abs().max() > 1e-6


# ----------------------------------------------------------------------------- losses


def test_full_covariance_nll_is_the_gaussian_nll() -> None:
    rng = torch.Generator().manual_seed(5)
    pred, target = torch.randn(6, 3, generator=rng), torch.randn(6, 3, generator=rng)
    log_sigma = 0.3 * torch.randn(6, 3, generator=rng)
    diag = torch.diag_embed(torch.exp(2 * log_sigma))
    torch.testing.assert_close(
        full_covariance_nll(pred, diag, target), gaussian_nll_sum_over_axes(pred, log_sigma, target)
    )
    # rotated: the NLL of F Σ Fᵀ at F e equals the diagonal NLL at e
    rot = torch.tensor(random_rotations(6, seed=14), dtype=torch.float32)
    rotated = full_covariance_nll(
        torch.einsum("bij,bj->bi", rot, pred), rot @ diag @ rot.transpose(1, 2), torch.einsum("bij,bj->bi", rot, target)
    )
    torch.testing.assert_close(rotated, gaussian_nll_sum_over_axes(pred, log_sigma, target))


def learnable_targets(x: torch.Tensor, method: str) -> torch.Tensor:
    """A target the networks can fit: the window mean of gyro (yaw frame for displacement methods)."""
    _, gyro, _, rot = split_window(x, K)
    if method == "airio":
        return gyro.mean(1)
    return gravity_aligned(rot, gyro).mean(1)


@pytest.mark.parametrize("use_nll", (False, True))
@pytest.mark.parametrize("method", METHODS)
def test_loss_decreases_on_a_tiny_set(method: str, use_nll: bool) -> None:
    torch.manual_seed(6)
    net = small(method)
    x = smooth_window(64, seed=15)
    y = learnable_targets(x, method)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def evaluate() -> float:
        net.eval()
        with torch.no_grad():
            value = float(baseline_loss(method, net(x), y, use_nll))
        net.train()
        return value

    before = evaluate()
    for _ in range(30):
        opt.zero_grad()
        loss = baseline_loss(method, net(x), y, use_nll)
        loss.backward()
        if not use_nll:  # warm-up keeps every parameter (the σ head too) in the graph, as DDP needs
            assert all(p.grad is not None for p in net.parameters())
        opt.step()
    after = evaluate()
    assert after < before - 0.05 * abs(before), (before, after)


def test_baseline_loss_rejects_unknown_method() -> None:
    out = small("tlio")(smooth_window(2, seed=16))
    with pytest.raises(ValueError):
        baseline_loss("velobins", out, torch.zeros(2, 3), False)
