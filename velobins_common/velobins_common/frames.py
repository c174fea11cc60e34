"""Static frame rotations: the IMU→body rotation from a parameter or from a tree of static transforms.

The network and the filter work in the body frame (REP-103 FLU: x forward, y left, z up). An IMU
is often mounted otherwise — a PX4 IMU reports in FRD, a board may sit rotated on its mount — and
its messages say so in ``header.frame_id``. This module is the ROS-free half of honouring that:

* :func:`parse_rotation` reads the ``imu_to_body`` parameter: 4 numbers are a unit quaternion in
  ROS order (x, y, z, w), 9 numbers a row-major rotation matrix. Either rotates vectors from the
  IMU frame into the body frame (``v_body = R @ v_imu``), the same convention as a TF transform
  ``body ← imu`` (``header.frame_id`` = body, ``child_frame_id`` = IMU). Invalid values (wrong
  count, not finite, not unit, not orthonormal, a reflection) raise ``ValueError`` saying which.
* :data:`FRD_TO_FLU` is the common case: 180° about x.
* :func:`quaternion_to_matrix` and :func:`matrix_to_quaternion` are the project's one definition of
  the two conversions (the filter, ``velobins_ekf.so3``, uses them too).
* :class:`StaticTransformTree` collects ``parent ← child`` static transforms (what ``/tf_static``
  carries) and composes the rotation between any two connected frames by walking the tree.

Only the rotation matters for the IMU. The translation (lever arm ``r`` from the body origin to the
IMU) is stored but not applied: on a rigid body the angular rate is the same everywhere, and the
specific force at the IMU differs from the body origin's only by ``ω̇ × r + ω × (ω × r)``. For a
body-mounted IMU (``|r|`` a few cm) at the rates of hover and ordinary flight (``|ω|`` ≲ 2 rad/s,
``|ω̇|`` ≲ 10 rad/s²) that is ≲ 0.1–0.5 m/s² in bursts, below the accelerometer noise and vibration
of a multirotor, and the networks are trained on IMUs mounted the same way without correcting it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from velobins_common.constants import UNIT_QUATERNION_TOLERANCE

IDENTITY_QUATERNION: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)
"""No rotation, (x, y, z, w)."""

FRD_TO_FLU: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)
"""``imu_to_body`` for an IMU in FRD (x forward, y right, z down; PX4, many flight controllers):
180° about x, i.e. ``(x, y, z) → (x, −y, −z)``. As a matrix: ``diag(1, −1, −1)``."""


def normalize_frame(name: str) -> str:
    """A frame id as tf2 compares it: without a leading ``/`` (ROS 1 style ids still occur in bags)."""
    return name.strip().lstrip("/")


def quaternion_to_matrix(q: Sequence[float] | np.ndarray) -> np.ndarray:
    """Rotation matrix of the quaternion ``q`` = (x, y, z, w), normalised here (body→world for a pose).

    The one quaternion→matrix conversion of the project (the filter's ``so3.quat_to_matrix`` is this).

    Raises:
        ValueError: ``q`` is not a finite, non-zero 4-vector.
    """
    qa = np.asarray(q, dtype=np.float64)
    n = float(np.linalg.norm(qa))
    if qa.shape != (4,) or not math.isfinite(n) or n < 1e-9:
        raise ValueError(f"quaternion {qa} is not a finite non-zero 4-vector (x, y, z, w)")
    x, y, z, w = qa / n
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quaternion(r: np.ndarray) -> np.ndarray:
    """Unit quaternion (x, y, z, w) of the rotation matrix ``r``, with ``w ≥ 0`` (Shepperd's method).

    The one matrix→quaternion conversion of the project (the filter's ``so3.matrix_to_quat`` is this).
    """
    m = np.asarray(r, dtype=np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = ((m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s)
    elif m[0, 0] >= m[1, 1] and m[0, 0] >= m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = (0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s)
    elif m[1, 1] >= m[2, 2]:
        s = 2.0 * math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = ((m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = ((m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s)
    qa = np.asarray(q) / np.linalg.norm(q)
    return -qa if qa[3] < 0 else qa


def is_unit_quaternion(q: Sequence[float] | np.ndarray, tol: float = UNIT_QUATERNION_TOLERANCE) -> bool:
    """Whether ``q`` is a finite 4-vector whose norm is within ``tol`` of 1 (a rotation from outside: a
    message, a file), before it is re-normalised and used."""
    qa = np.asarray(q, dtype=np.float64)
    return bool(qa.shape == (4,) and np.all(np.isfinite(qa)) and abs(float(np.linalg.norm(qa)) - 1.0) <= tol)


def _unit_quaternion(values: Sequence[float], name: str, tol: float) -> np.ndarray:
    q = np.asarray(values, dtype=np.float64)
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > tol:
        raise ValueError(
            f"{name}: quaternion (x, y, z, w) = {tuple(float(v) for v in q)} has norm {norm:.6g}, "
            f"not 1 (±{tol:g}); e.g. the identity is (0, 0, 0, 1) and FRD→FLU is (1, 0, 0, 0)"
        )
    return q / norm


def parse_rotation(
    values: Iterable[float], name: str = "imu_to_body", tol: float = UNIT_QUATERNION_TOLERANCE
) -> np.ndarray:
    """The 3×3 rotation given by a parameter value: 4 numbers (quaternion x, y, z, w) or 9 (row-major matrix).

    The result rotates vectors from the sensor frame into the body frame. Values within ``tol`` of
    a rotation are accepted and made exact (quaternion normalised, matrix projected onto the
    nearest rotation), so that composing and applying it adds no scale error.

    Raises:
        ValueError: naming ``name``, when the count is not 4 or 9, a value is not finite, the
            quaternion is not unit, or the matrix is not orthonormal or is a reflection (det −1).
    """
    try:
        v = np.asarray([float(x) for x in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers, got {values!r}") from None
    if v.size not in (4, 9):
        raise ValueError(
            f"{name}: expected 4 numbers (quaternion x, y, z, w) or 9 (row-major rotation matrix), got {v.size}"
        )
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name}: values must be finite, got {v.tolist()}")
    if v.size == 4:
        return quaternion_to_matrix(_unit_quaternion(v, name, tol))
    m = v.reshape(3, 3)
    err = float(np.max(np.abs(m.T @ m - np.eye(3))))
    if err > tol:
        raise ValueError(
            f"{name}: the 3×3 matrix (row-major) {m.tolist()} is not orthonormal (max |RᵀR − I| = {err:.3g} "
            f"> {tol:g}); give a rotation matrix or a quaternion (x, y, z, w)"
        )
    det = float(np.linalg.det(m))
    if det < 0:
        raise ValueError(
            f"{name}: the matrix has determinant {det:.3g}: a reflection, not a rotation (a left-handed axis "
            "convention?); FRD→FLU is the rotation diag(1, −1, −1), 180° about x"
        )
    u, _, vt = np.linalg.svd(m)
    return u @ vt


def is_identity(r: np.ndarray, tol: float = 1e-12) -> bool:
    """Whether ``r`` is the identity (then a caller can skip the matrix product)."""
    return bool(np.max(np.abs(np.asarray(r) - np.eye(3))) <= tol)


def describe_rotation(r: np.ndarray) -> str:
    """A log-friendly description: quaternion (x, y, z, w) and the angle and axis of the rotation."""
    q = matrix_to_quaternion(r)
    angle = 2.0 * math.degrees(math.atan2(math.hypot(*q[:3]), q[3]))
    if angle < 1e-9:
        return "identity"
    axis = np.asarray(q[:3]) / math.hypot(*q[:3])
    return (
        f"quaternion (x, y, z, w) = ({q[0]:.4f}, {q[1]:.4f}, {q[2]:.4f}, {q[3]:.4f}), "
        f"{angle:.1f}° about ({axis[0]:.3f}, {axis[1]:.3f}, {axis[2]:.3f})"
    )


@dataclass(frozen=True)
class StaticTransform:
    """One ``parent ← child`` edge: ``v_parent = rotation @ v_child + translation``."""

    parent: str
    rotation: np.ndarray
    translation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Stored for completeness; the IMU uses only the rotation (see the module docstring)."""


class StaticTransformTree:
    """A tree of static transforms keyed by child frame, as ``/tf_static`` builds one.

    Every frame has at most one parent; adding a transform for a child that already has one
    replaces it (a re-published static transform wins, as in tf2). A transform that would close a
    cycle is refused. :meth:`rotation` composes the rotation between any two frames of one tree.
    """

    def __init__(self) -> None:
        self._edges: dict[str, StaticTransform] = {}

    def __len__(self) -> int:
        return len(self._edges)

    def __contains__(self, frame: str) -> bool:
        f = normalize_frame(frame)
        return f in self._edges or any(e.parent == f for e in self._edges.values())

    def add(
        self,
        parent: str,
        child: str,
        quaternion: Sequence[float],
        translation: Sequence[float] = (0.0, 0.0, 0.0),
        tol: float = UNIT_QUATERNION_TOLERANCE,
    ) -> bool:
        """Add (or replace) the transform ``parent ← child``; returns whether the tree changed.

        ``quaternion`` (x, y, z, w) rotates vectors from ``child`` into ``parent`` (TF's convention
        for ``header.frame_id`` = parent, ``child_frame_id`` = child).

        Raises:
            ValueError: empty or equal frame names, a quaternion that is not unit (within ``tol``),
                or an edge that would make a cycle.
        """
        p, c = normalize_frame(parent), normalize_frame(child)
        if not p or not c:
            raise ValueError(f"static transform needs both frame ids, got parent {parent!r}, child {child!r}")
        if p == c:
            raise ValueError(f"static transform from {p!r} to itself")
        label = f"static transform {p} ← {c}"
        rot = quaternion_to_matrix(_unit_quaternion(quaternion, label, tol))
        t = tuple(float(x) for x in translation)
        if len(t) != 3 or not all(math.isfinite(x) for x in t):
            raise ValueError(f"{label}: translation must be 3 finite numbers, got {tuple(translation)!r}")
        if c in self._path_to_root(p):
            raise ValueError(f"{label} would close a cycle ({c!r} is already an ancestor of {p!r})")
        old = self._edges.get(c)
        if old is not None and old.parent == p and np.array_equal(old.rotation, rot) and old.translation == t:
            return False
        self._edges[c] = StaticTransform(p, rot, t)  # type: ignore[arg-type]
        return True

    def parent(self, frame: str) -> str | None:
        """The parent of ``frame``, or None for a root or an unknown frame."""
        edge = self._edges.get(normalize_frame(frame))
        return edge.parent if edge else None

    def _path_to_root(self, frame: str) -> list[str]:
        path = [frame]
        while frame in self._edges:
            frame = self._edges[frame].parent
            path.append(frame)
        return path

    def to_ancestor(self, frame: str, ancestor: str) -> np.ndarray | None:
        """Rotation taking vectors in ``frame`` into ``ancestor`` (a frame on its way to the root), or None."""
        f, a = normalize_frame(frame), normalize_frame(ancestor)
        r = np.eye(3)
        while f != a:
            edge = self._edges.get(f)
            if edge is None:
                return None
            r = edge.rotation @ r
            f = edge.parent
        return r

    def rotation(self, target: str, source: str) -> np.ndarray | None:
        """Rotation taking vectors in ``source`` into ``target`` (``v_target = R @ v_source``), or None.

        The frames may sit on different branches: both are walked up to their nearest common
        ancestor. None when they are not connected (a transform is still missing).
        """
        t, s = normalize_frame(target), normalize_frame(source)
        up_t = self._path_to_root(t)
        common = next((f for f in self._path_to_root(s) if f in up_t), None)
        if common is None:
            return None
        r_common_source = self.to_ancestor(s, common)
        r_common_target = self.to_ancestor(t, common)
        assert r_common_source is not None and r_common_target is not None
        return r_common_target.T @ r_common_source
