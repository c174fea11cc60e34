"""velobins_common.frames: the imu_to_body parameter, its validation, FRD, and static-transform chains."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from velobins_common.frames import (
    FRD_TO_FLU,
    IDENTITY_QUATERNION,
    StaticTransformTree,
    describe_rotation,
    is_identity,
    is_unit_quaternion,
    matrix_to_quaternion,
    normalize_frame,
    parse_rotation,
    quaternion_to_matrix,
)


def random_rotation(seed: int) -> Rotation:
    return Rotation.random(random_state=seed)


# ---------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("seed", range(5))
def test_quaternion_and_matrix_agree_with_scipy(seed: int) -> None:
    rot = random_rotation(seed)
    q = rot.as_quat()  # scipy uses (x, y, z, w), the ROS order
    np.testing.assert_allclose(parse_rotation(q), rot.as_matrix(), atol=1e-12)
    np.testing.assert_allclose(parse_rotation(rot.as_matrix().reshape(-1)), rot.as_matrix(), atol=1e-12)
    np.testing.assert_allclose(quaternion_to_matrix(-q), rot.as_matrix(), atol=1e-12)  # q and -q: one rotation
    back = matrix_to_quaternion(rot.as_matrix())
    assert back[3] >= 0
    np.testing.assert_allclose(quaternion_to_matrix(back), rot.as_matrix(), atol=1e-12)
    np.testing.assert_allclose(back, q if q[3] >= 0 else -q, atol=1e-12)


@pytest.mark.parametrize("r", [np.diag([1.0, -1.0, -1.0]), np.diag([-1.0, 1.0, -1.0]), np.diag([-1.0, -1.0, 1.0])])
def test_matrix_to_quaternion_every_branch_of_shepperd(r: np.ndarray) -> None:
    # trace −1: the 180° rotations about x, y, z take the three diagonal branches
    q = matrix_to_quaternion(r)
    np.testing.assert_allclose(quaternion_to_matrix(q), r, atol=1e-12)
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-12


def test_quaternion_to_matrix_refuses_what_is_no_rotation() -> None:
    for bad in ([0.0, 0.0, 0.0, 0.0], [math.nan, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0]):
        with pytest.raises(ValueError, match="finite non-zero 4-vector"):
            quaternion_to_matrix(bad)
    np.testing.assert_allclose(quaternion_to_matrix([0.0, 0.0, 0.0, 2.0]), np.eye(3))  # normalised first


def test_is_unit_quaternion_within_the_shared_tolerance() -> None:
    assert is_unit_quaternion([0.0, 0.0, 0.7071, 0.7071])  # typed with 4 decimals: norm 0.99999
    assert not is_unit_quaternion([0.0, 0.0, 0.0, 1.01])
    assert not is_unit_quaternion([math.inf, 0.0, 0.0, 1.0])
    assert not is_unit_quaternion([0.0, 0.0, 1.0])


def test_matrix_is_row_major_and_rotates_imu_into_body() -> None:
    # IMU x axis points along body y (yaw +90°): a vector along IMU x is body y.
    r = parse_rotation([0, -1, 0, 1, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(r @ [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], atol=1e-12)
    s = math.sqrt(0.5)
    np.testing.assert_allclose(parse_rotation([0, 0, s, s]), r, atol=1e-12)


def test_values_within_tolerance_are_made_exact() -> None:
    r = parse_rotation([0.0, 0.0, 0.7071, 0.7071])  # typed with 4 decimals
    np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-14)
    m = parse_rotation(np.array([[1.0, 0, 0], [0, 0.0, -1.0004], [0, 1, 0]]).reshape(-1))
    np.testing.assert_allclose(m.T @ m, np.eye(3), atol=1e-14)
    assert np.linalg.det(m) == pytest.approx(1.0)


def test_frd_to_flu() -> None:
    r = parse_rotation(FRD_TO_FLU)
    np.testing.assert_allclose(r, np.diag([1.0, -1.0, -1.0]), atol=1e-15)
    # a level FRD IMU at rest measures -g along its z (down); in FLU that is +g along z (up)
    np.testing.assert_allclose(r @ [0.0, 0.0, -9.81], [0.0, 0.0, 9.81])
    np.testing.assert_allclose(r, Rotation.from_euler("x", 180, degrees=True).as_matrix(), atol=1e-12)
    assert "180.0° about (1.000, 0.000, 0.000)" in describe_rotation(r)


def test_identity() -> None:
    assert is_identity(parse_rotation(IDENTITY_QUATERNION))
    assert is_identity(parse_rotation(np.eye(3).reshape(-1)))
    assert not is_identity(parse_rotation(FRD_TO_FLU))
    assert describe_rotation(np.eye(3)) == "identity"


# ---------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1.0, 0.0, 0.0], "expected 4 numbers"),
        ([], "got 0"),
        ([0.0] * 8, "got 8"),
        ([0.0, 0.0, 0.0, 2.0], "has norm 2"),
        ([0.0, 0.0, 0.0, 0.0], "has norm 0"),
        ([math.nan, 0.0, 0.0, 1.0], "finite"),
        ([1.0, 0, 0, 0, 2.0, 0, 0, 0, 1.0], "not orthonormal"),
        ([1.0, 0, 0, 0, 1.0, 0, 0, 0, -1.0], "reflection"),
        (["a", 0, 0, 1], "expected numbers"),
    ],
)
def test_invalid_values_raise_clear_errors(values: list, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_rotation(values)
    assert str(info.value).startswith("imu_to_body: ")


def test_error_names_the_parameter() -> None:
    with pytest.raises(ValueError, match=r"^my_param: "):
        parse_rotation([1.0, 2.0], name="my_param")


# ---------------------------------------------------------------------------------- the tree
def test_two_level_chain_composes() -> None:
    """base_link ← mount ← imu: the rotation imu → base_link is R_base_mount @ R_mount_imu."""
    r_bm, r_mi = random_rotation(1), random_rotation(2)
    tree = StaticTransformTree()
    tree.add("base_link", "mount", r_bm.as_quat(), (0.1, 0.0, 0.0))
    tree.add("mount", "imu", r_mi.as_quat())
    expected = r_bm.as_matrix() @ r_mi.as_matrix()
    np.testing.assert_allclose(tree.to_ancestor("imu", "base_link"), expected, atol=1e-12)
    np.testing.assert_allclose(tree.rotation("base_link", "imu"), expected, atol=1e-12)
    np.testing.assert_allclose(tree.rotation("imu", "base_link"), expected.T, atol=1e-12)
    assert is_identity(tree.rotation("imu", "imu"))
    assert tree.parent("imu") == "mount" and tree.parent("base_link") is None
    assert "mount" in tree and "base_link" in tree and "nowhere" not in tree and len(tree) == 2


def test_sibling_branches_and_unknown_frames() -> None:
    """Frames on different branches compose through their common ancestor; unconnected give None."""
    r_a, r_b = random_rotation(3), random_rotation(4)
    tree = StaticTransformTree()
    tree.add("base_link", "imu_link", r_a.as_quat())
    tree.add("base_link", "camera", r_b.as_quat())
    np.testing.assert_allclose(tree.rotation("camera", "imu_link"), r_b.as_matrix().T @ r_a.as_matrix(), atol=1e-12)
    assert tree.rotation("base_link", "lidar") is None
    assert tree.to_ancestor("imu_link", "camera") is None
    tree.add("odom", "map_thing", IDENTITY_QUATERNION)  # a second, disconnected tree
    assert tree.rotation("base_link", "map_thing") is None


def test_frd_through_the_tree_and_leading_slash() -> None:
    tree = StaticTransformTree()
    tree.add("/base_link", "imu_frd", FRD_TO_FLU)
    assert normalize_frame("/base_link") == "base_link"
    np.testing.assert_allclose(tree.rotation("base_link", "/imu_frd"), np.diag([1.0, -1.0, -1.0]), atol=1e-15)


def test_republished_transform_replaces_and_reports_change() -> None:
    tree = StaticTransformTree()
    assert tree.add("base_link", "imu", IDENTITY_QUATERNION)
    assert not tree.add("base_link", "imu", IDENTITY_QUATERNION)  # same values: unchanged
    assert tree.add("base_link", "imu", FRD_TO_FLU)
    np.testing.assert_allclose(tree.rotation("base_link", "imu"), np.diag([1.0, -1.0, -1.0]), atol=1e-15)
    assert tree.add("mount", "imu", IDENTITY_QUATERNION)  # re-parented, as tf2 does
    assert tree.parent("imu") == "mount" and tree.rotation("base_link", "imu") is None


def test_tree_rejects_bad_transforms() -> None:
    tree = StaticTransformTree()
    tree.add("a", "b", IDENTITY_QUATERNION)
    with pytest.raises(ValueError, match="cycle"):
        tree.add("b", "a", IDENTITY_QUATERNION)
    with pytest.raises(ValueError, match="itself"):
        tree.add("a", "/a", IDENTITY_QUATERNION)
    with pytest.raises(ValueError, match="both frame ids"):
        tree.add("", "c", IDENTITY_QUATERNION)
    with pytest.raises(ValueError, match="norm"):
        tree.add("a", "c", (0.0, 0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="translation"):
        tree.add("a", "c", IDENTITY_QUATERNION, (0.0, math.inf, 0.0))
    assert len(tree) == 1
