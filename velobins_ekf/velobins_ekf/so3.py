"""SO(3) helpers for the error-state EKF (readable, vectorisable reference versions).

Conventions used across ``velobins_ekf``: rotation matrices map body to world, quaternions are
scalar-last ``(x, y, z, w)`` as in :mod:`scipy.spatial.transform` and the :class:`Sequence`
format, and the exponential map is ``Exp(φ) = I + sin|φ|/|φ| [φ]× + (1 - cos|φ|)/|φ|² [φ]×²``.
The right Jacobian ``Jr(φ)`` satisfies ``Exp(φ + δ) ≈ Exp(φ) Exp(Jr(φ) δ)`` (Solà et al.,
"A micro Lie theory", eq. 143). :mod:`velobins_ekf.propagation` builds its series from the same
:func:`exp_coefficients`; the matrix helpers here are the reference the tests compare against.
"""

from __future__ import annotations

import math

import numpy as np

# The quaternion <-> matrix conversions are defined once, in velobins_common.frames; the filter uses
# them under these names (state.py, node.py).
from velobins_common.frames import matrix_to_quaternion as matrix_to_quat  # noqa: F401
from velobins_common.frames import quaternion_to_matrix as quat_to_matrix  # noqa: F401

SMALL_ANGLE = 1e-4
"""Below this angle [rad] the Taylor series replace the closed forms (no 0/0)."""


def skew(w: np.ndarray | tuple[float, float, float]) -> np.ndarray:
    """Cross-product matrix ``[w]×`` so that ``skew(w) @ u == np.cross(w, u)``: (3, 3) of a
    3-vector (3 floats or an array), (n, 3, 3) of (n, 3) vectors."""
    if isinstance(w, tuple):
        x, y, z = w
        lead = ()
    else:
        w = np.asarray(w, dtype=np.float64)
        x, y, z = w[..., 0], w[..., 1], w[..., 2]
        lead = w.shape[:-1]
    return stack_entries((0.0, -z, y, z, 0.0, -x, -y, x, 0.0), lead, (3, 3))


def stack_entries(entries: tuple, lead: tuple[int, ...], tail: tuple[int, ...]) -> np.ndarray:
    """Array of shape ``lead + tail`` from its row-major entries: floats (``lead == ()``, one
    matrix, one cheap conversion) or arrays of shape ``lead`` mixed with constants (a batch)."""
    if not lead:
        return np.array(entries, dtype=np.float64).reshape(tail)
    # Fast path of np.stack(np.broadcast_arrays(*entries), axis=-1): one buffer filled column by column
    # (each assignment broadcasts a constant or copies an array), a fifth of the cost on a block.
    out = np.empty((*lead, len(entries)))
    for i, entry in enumerate(entries):
        out[..., i] = entry
    return out.reshape((*lead, *tail))


def exp_coefficients(theta2):
    """Return ``(a, b, c) = (sin t / t, (1 - cos t) / t², (t - sin t) / t³)`` for ``t² = theta2``.

    ``Exp = I + a K + b K²`` and ``Jr = I - b K + c K²`` with ``K = [φ]×``. Taylor series to
    fourth order are used below :data:`SMALL_ANGLE` (their error is < 1e-20 there). ``theta2`` is
    a float (one rotation, evaluated with :mod:`math`) or an array (element-wise, with numpy).
    """
    if isinstance(theta2, float):
        if theta2 < SMALL_ANGLE * SMALL_ANGLE:
            return _series_coefficients(theta2)
        return _closed_coefficients(theta2, math.sqrt(theta2), math.sin, math.cos)
    small = theta2 < SMALL_ANGLE * SMALL_ANGLE
    t2 = np.where(small, 1.0, theta2)
    closed = _closed_coefficients(t2, np.sqrt(t2), np.sin, np.cos)
    series = _series_coefficients(theta2)
    return tuple(np.where(small, s, c) for s, c in zip(series, closed, strict=True))


def _series_coefficients(t2):
    """The coefficients of :func:`exp_coefficients` by their Taylor series in ``t²``."""
    return 1.0 - t2 / 6.0, 0.5 - t2 / 24.0, 1.0 / 6.0 - t2 / 120.0


def _closed_coefficients(t2, t, sin, cos):
    """The coefficients of :func:`exp_coefficients` in closed form (``t > 0``)."""
    s = sin(t)
    return s / t, (1.0 - cos(t)) / t2, (t - s) / (t2 * t)


def so3_exp(phi: np.ndarray) -> np.ndarray:
    """Rotation matrix ``Exp(φ)`` of a rotation vector φ [rad] (Rodrigues)."""
    k = skew(phi)
    a, b, _ = exp_coefficients(float(np.dot(phi, phi)))
    return np.eye(3) + a * k + b * (k @ k)


def so3_log(rot: np.ndarray) -> np.ndarray:
    """Rotation vector φ with ``Exp(φ) = rot`` (|φ| ≤ π), via scipy for robustness near π."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix(rot).as_rotvec()


def right_jacobian(phi: np.ndarray) -> np.ndarray:
    """Right Jacobian ``Jr(φ) = I - (1 - cos t)/t² [φ]× + (t - sin t)/t³ [φ]×²`` of SO(3)."""
    k = skew(phi)
    _, b, c = exp_coefficients(float(np.dot(phi, phi)))
    return np.eye(3) - b * k + c * (k @ k)


def orthonormalise(rot: np.ndarray) -> np.ndarray:
    """Nearest rotation matrix (SVD projection); removes round-off drift after long runs."""
    u, _, vt = np.linalg.svd(rot)
    r = u @ vt
    if np.linalg.det(r) < 0:
        u[:, -1] = -u[:, -1]
        r = u @ vt
    return r
