"""Stochastic cloning: past poses kept in the filter for displacement measurements (TLIO §III-C).

A displacement method (TLIO, EqNIO, IMO) measures how far the body moved over a window
``[t_s, t_e]``. That relates the pose at ``t_s`` to the pose at ``t_e``, so the filter keeps a
*clone* of the pose at ``t_s`` (Roumeliotis & Burdick, "Stochastic cloning", ICRA 2002; TLIO, Liu et
al., RA-L 2020, keeps the same 6-D clones in its MSCKF-style state).

Clone ``i`` holds the nominal rotation and position at ``t_i``; its error is ``[δθ_i, δp_i]``
with the navigation state's conventions (:mod:`velobins_ekf.state`: right rotation perturbation,
additive position). The error state becomes ``[δx (15), δc_1 (6), …, δc_N (6)]``, stored as three
blocks so that the 15x15 navigation covariance (and with it the velocity path) is untouched:

* ``P_xx`` — the navigation covariance, owned by :class:`~velobins_ekf.ekf.ErrorStateEkf`;
* ``P_xc`` (15 x 6N) — :attr:`CloneSet.cross`, the navigation/clone cross-covariance;
* ``P_cc`` (6N x 6N) — :attr:`CloneSet.cov`.

Cloning is the map ``x ↦ (x, c, J x)`` with ``J`` selecting the rotation and position errors
(:func:`clone_jacobian`), so ``P_aug = J_aug P J_augᵀ`` (:func:`augment`). A clone is constant,
``δc⁺ = δc``: propagation with transition ``Φ`` changes only the cross-covariance, ``P_xc ← Φ P_xc``
(:func:`propagate_cross`). A clone no longer needed is marginalised by deleting its rows and columns
(:func:`marginalise`), which is exact for a Gaussian.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from velobins_ekf.so3 import right_jacobian, so3_exp
from velobins_ekf.state import DIM, POS, ROT, NavState, join_blocks, split_blocks

CLONE_DIM = 6
"""Error dimension of one clone: ``[δθ, δp]``."""
C_ROT = slice(0, 3)
"""Rotation error block inside one clone's 6 entries."""
C_POS = slice(3, 6)
"""Position error block inside one clone's 6 entries."""


@dataclass
class CloneSet:
    """The cloned poses and their covariance blocks (oldest first)."""

    stamps: list[float] = field(default_factory=list)
    """Clone stamps [s], increasing."""
    rot: list[np.ndarray] = field(default_factory=list)
    """(3, 3) body->world rotation of each clone."""
    pos: list[np.ndarray] = field(default_factory=list)
    """(3,) world position of each clone [m]."""
    cross: np.ndarray = field(default_factory=lambda: np.zeros((DIM, 0)))
    """(15, 6N) navigation/clone cross-covariance ``P_xc``."""
    cov: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(6N, 6N) clone covariance ``P_cc``."""

    def __len__(self) -> int:
        return len(self.stamps)

    def copy(self) -> CloneSet:
        """Deep copy (the snapshots of late-measurement re-propagation)."""
        return CloneSet(
            list(self.stamps),
            [r.copy() for r in self.rot],
            [p.copy() for p in self.pos],
            self.cross.copy(),
            self.cov.copy(),
        )

    def index(self, t: float) -> int:
        """Index of the clone stamped exactly ``t``, or -1."""
        try:
            return self.stamps.index(t)
        except ValueError:
            return -1


def block(i: int) -> slice:
    """Columns of clone ``i`` in the clone part (``P_xc``'s columns, ``P_cc``'s rows/columns)."""
    return slice(CLONE_DIM * i, CLONE_DIM * (i + 1))


def clone_jacobian() -> np.ndarray:
    """``J`` (6 x 15): the new clone's error ``[δθ, δp]`` as a function of the navigation error."""
    j = np.zeros((CLONE_DIM, DIM))
    j[C_ROT, ROT] = np.eye(3)
    j[C_POS, POS] = np.eye(3)
    return j


def assemble(nav_cov: np.ndarray, clones: CloneSet) -> np.ndarray:
    """The full covariance ``[[P_xx, P_xc], [P_xcᵀ, P_cc]]`` of ``[δx, δc]`` (a new array)."""
    return join_blocks(nav_cov, clones.cross, clones.cov)


def split(full: np.ndarray, nav_cov: np.ndarray, clones: CloneSet) -> None:
    """Write a full covariance back into ``nav_cov`` (in place) and the clone blocks."""
    clones.cross, clones.cov = split_blocks(full, nav_cov)


def augment(state: NavState, nav_cov: np.ndarray, clones: CloneSet, t: float) -> None:
    """Append a clone of ``state``'s pose at stamp ``t``: ``P_aug = J_aug P J_augᵀ`` with
    ``J_aug = [[I, 0], [0, I], [J, 0]]`` (the new clone last; :func:`clone_jacobian`), evaluated by
    blocks: the new clone's rows are ``J [P_xx, P_xc]`` and its diagonal block ``J P_xx Jᵀ``."""
    j = clone_jacobian()
    n = CLONE_DIM * len(clones)
    jp_xx = j @ nav_cov  # (6, 15)
    cov = np.empty((n + CLONE_DIM, n + CLONE_DIM))
    cov[:n, :n] = clones.cov
    cov[n:, :n] = j @ clones.cross
    cov[:n, n:] = cov[n:, :n].T
    cov[n:, n:] = jp_xx @ j.T
    clones.cross = np.hstack((clones.cross, jp_xx.T))
    clones.cov = cov
    clones.stamps.append(float(t))
    clones.rot.append(state.rot.copy())
    clones.pos.append(state.pos.copy())


def propagate_cross(clones: CloneSet, phi: np.ndarray) -> None:
    """``P_xc ← Φ P_xc`` for a navigation transition ``Φ`` (clones are constant: ``P_cc`` unchanged)."""
    if len(clones):
        clones.cross = phi @ clones.cross


def marginalise(clones: CloneSet, i: int) -> None:
    """Drop clone ``i`` (its rows and columns: exact marginalisation of a Gaussian)."""
    keep = np.ones(clones.cov.shape[0], dtype=bool)
    keep[block(i)] = False
    del clones.stamps[i], clones.rot[i], clones.pos[i]
    clones.cross = clones.cross[:, keep]
    clones.cov = clones.cov[np.ix_(keep, keep)]


def inject_clones(clones: CloneSet, dc: np.ndarray, full: np.ndarray) -> None:
    """Inject the clone part ``dc`` (6N,) of an error estimate and reset ``full`` (in place).

    Like :func:`velobins_ekf.update.inject` for the navigation rotation: ``R_i ← R_i Exp(δθ_i)``,
    ``p_i ← p_i + δp_i``, and the rows/columns of ``δθ_i`` of the full covariance are multiplied by
    ``Jr(δθ_i)`` (first-order reset of a right rotation error).
    """
    for i in range(len(clones)):
        d = dc[block(i)]
        clones.rot[i] = clones.rot[i] @ so3_exp(d[C_ROT])
        clones.pos[i] = clones.pos[i] + d[C_POS]
        rows = slice(DIM + CLONE_DIM * i, DIM + CLONE_DIM * i + 3)
        jr = right_jacobian(d[C_ROT])
        full[rows, :] = jr @ full[rows, :]
        full[:, rows] = full[:, rows] @ jr.T
