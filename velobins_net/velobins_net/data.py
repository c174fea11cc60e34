"""Training windows from flights: resampling, window indexing, normalisation statistics.

Training reads :class:`velobins_data.flight.Flight` objects (the one flight type of the suite).
Each flight is resampled to the
network rate when its own rate differs: inputs through :func:`velobins_net.resample.to_model_grid`
(the anti-alias FIR above the model rate, then linear interpolation: the streaming predictor's
path, so training sees the node's signal, filter delay included), targets by linear interpolation
only (the true velocity at each grid stamp). All flights are stored
back to back in one contiguous float32 array; a window is only an end index into it, so a
batch is a single vectorised gather (no per-item Python work). The target of a window is the
body-frame velocity Rᵀv at its last sample (§III-B, "last-step feature").

Baselines (:data:`velobins_net.config.ATTITUDE_METHODS`) also get the ground-truth attitude of every
sample (R row-major, slerp-resampled) as 9 more input channels, and the displacement methods the
displacement over the window ending at each sample, in the gravity-aligned frame of its first
sample (:func:`velobins_net.baselines.frames.displacement_target`), as target.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from velobins_common.constants import ROTOR_SPEED, canonical_rotor_kind
from velobins_common.errors import UserError
from velobins_common.interp import interp_columns
from velobins_data.flight import Flight

from .config import ModelConfig
from .resample import to_model_grid

_RATE_REL_TOL = 1e-3
"""A flight whose median rate is within this relative tolerance of the network rate is used as is."""

_MIN_STD = 1e-6
"""Channels with a smaller training std (constant signals) are normalised with std = 1."""


def attitude_columns(t: np.ndarray, q: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """(len(grid), 9) body->world rotation matrices, row-major, slerp-interpolated from quaternions
    ``q`` (x, y, z, w) stamped ``t`` (held at the ends)."""
    from scipy.spatial.transform import Rotation, Slerp

    g = np.clip(np.asarray(grid, dtype=np.float64), t[0], t[-1])
    rot = Rotation.from_quat(q) if np.array_equal(t, grid) else Slerp(t, Rotation.from_quat(q))(g)
    return rot.as_matrix().reshape(-1, 9)


def resample(
    t: np.ndarray, values: np.ndarray, rate_hz: float, antialias: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(T, C) ``values`` onto the uniform grid t[0] + k/rate inside [t[0], t[-1]].

    Network inputs (``antialias``) go through :func:`velobins_net.resample.to_model_grid` (the
    anti-alias FIR when the flight's rate is above the model rate, then linear interpolation);
    other columns (targets) are only interpolated. Returned unchanged when the stamps are already
    uniform at ``rate_hz``.
    """
    dt = np.diff(t)
    period = 1.0 / rate_hz
    if np.all(np.abs(dt - period) < _RATE_REL_TOL * period):
        return t, values
    n = int(np.floor((t[-1] - t[0]) * rate_hz + 1e-9)) + 1
    grid = t[0] + np.arange(n) * period
    values = np.asarray(values, dtype=np.float64)
    return grid, to_model_grid(grid, t, values, rate_hz) if antialias else interp_columns(grid, t, values)


def flight_arrays(flight: Flight, cfg: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    """One flight → (inputs (T, 6+K) raw [acc, gyro, rotor], targets (T, 3) body velocity), at cfg.rate_hz."""
    src = str(flight.metadata.get("source", flight.name))
    if flight.rotor_kind != cfg.rotor_kind:
        raise UserError(f"{src}: field 'rotor_kind' is {flight.rotor_kind!r} but the model expects {cfg.rotor_kind!r}")
    if flight.rotor.ndim != 2 or flight.rotor.shape[1] != cfg.num_rotors:
        raise UserError(f"{src}: field 'rotor' has shape {flight.rotor.shape}, model expects K={cfg.num_rotors}")
    t = np.asarray(flight.t, dtype=np.float64)
    grid, inputs = resample(t, np.concatenate([flight.acc, flight.gyro, flight.rotor], axis=1), cfg.rate_hz)
    inputs = np.asarray(inputs)
    if cfg.attitude_input:
        rot = attitude_columns(t, np.asarray(flight.q, dtype=np.float64), grid)
        inputs = np.concatenate([inputs, rot], axis=1)
    if cfg.output_kind == "displacement":
        _, pos = resample(t, np.asarray(flight.p, dtype=np.float64), cfg.rate_hz, antialias=False)
        return inputs, window_displacements(np.asarray(pos), rot, cfg.window_len)
    _, targets = resample(t, flight.body_velocity(), cfg.rate_hz, antialias=False)
    return inputs, np.asarray(targets)


def window_displacements(pos: np.ndarray, rot: np.ndarray, window_len: int) -> np.ndarray:
    """(S, 3) target of the window ending at each sample: the displacement over it in the gravity-aligned
    frame of its first sample (:func:`velobins_net.baselines.frames.displacement_target`); 0 for the
    first ``window_len − 1`` samples, which end no window."""
    from .baselines.frames import displacement_target

    out = np.zeros_like(pos)
    if len(pos) >= window_len:
        s = np.arange(len(pos) - window_len + 1)
        e = s + window_len - 1
        p = torch.from_numpy(pos)
        r = torch.from_numpy(rot.reshape(-1, 3, 3))
        out[window_len - 1 :] = displacement_target(p[s], p[e], r[s]).numpy()
    return out


def split_tails(flights: Seq[Flight], share: float, window_s: float) -> tuple[list[Flight], list[Flight]]:
    """(first 1 − ``share``, last ``share``) of every flight: training and validation parts.

    Checkpoint selection on windows from every flight does not hinge on which one or two flights were held
    out, the failure of small data sets. A flight whose tail would be shorter than two windows is kept whole
    for training (a window needs ``window_s`` of history).

    Raises:
        ValueError: when ``share`` is not in (0, 1) or no flight is long enough to give a tail.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"the share held out of every flight must be in (0, 1), got {share}")
    train, val = [], []
    for f in flights:
        cut = round(len(f.t) * (1.0 - share))
        if cut <= 0 or f.t[-1] - f.t[cut] < 2.0 * window_s:
            train.append(f)
            continue
        train.append(f.slice(0, cut))
        val.append(f.slice(cut, len(f.t)))
    if not val:
        raise ValueError(f"every flight is too short to hold out {share:.0%} of it (two {window_s:g} s windows)")
    return train, val


class WindowDataset(Dataset):
    """All windows of a set of flights, over one contiguous float32 array.

    Attributes:
        inputs: (S, 6+K) raw inputs of every flight, back to back.
        targets: (S, 3) body velocity of every sample.
        ends: (W,) index (into ``inputs``) of each window's last sample.
        window_len: T.
        names: flight names, in order.
    """

    def __init__(self, flights: Seq[Flight], cfg: ModelConfig, stride: int = 1):
        if stride < 1:
            raise ValueError(f"WindowDataset.stride: must be >= 1, got {stride}")
        self.window_len = cfg.window_len
        ins, tgts, ends = [], [], []
        offset = 0
        self.names = [s.name for s in flights]
        for flight in flights:
            x, y = flight_arrays(flight, cfg)
            if len(x) >= self.window_len:
                ends.append(offset + np.arange(self.window_len - 1, len(x), stride))
            ins.append(x)
            tgts.append(y)
            offset += len(x)
        if not ends:
            raise UserError(f"no flight is longer than one network window ({cfg.window_s} s)")
        self.inputs = torch.from_numpy(np.concatenate(ins).astype(np.float32))
        self.targets = torch.from_numpy(np.concatenate(tgts).astype(np.float32))
        self.ends = torch.from_numpy(np.concatenate(ends).astype(np.int64))
        self._offsets = torch.arange(-self.window_len + 1, 1)

    def __len__(self) -> int:
        return int(self.ends.shape[0])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        e = int(self.ends[i])
        return self.inputs[e - self.window_len + 1 : e + 1], self.targets[e]

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``idx`` (B,) → x (B, T, 6+K), y (B, 3) in one vectorised gather."""
        e = self.ends[idx]
        return self.inputs[e.unsqueeze(1) + self._offsets], self.targets[e]


@dataclass(frozen=True)
class Normalization:
    """Per-channel training statistics of the encoder input (acc, gyro, rotor feature)."""

    mean: np.ndarray
    std: np.ndarray


def fit_normalization(inputs: torch.Tensor, rotor_kind: str, channels: int | None = None) -> Normalization:
    """Mean/std per channel of the training inputs (S, 6+K), after the rotor transform (ω² for rotor speeds).

    ``channels``: only the first ``channels`` columns (the sensor channels; attitude columns of the
    baselines are not normalised); None: all.
    """
    x = inputs[:, :channels].to(torch.float64)
    if canonical_rotor_kind(rotor_kind) == ROTOR_SPEED:
        x = torch.cat([x[:, :6], x[:, 6:].square()], dim=1)
    mean = x.mean(0)
    std = x.std(0)
    std = torch.where(std < _MIN_STD, torch.ones_like(std), std)
    return Normalization(mean.numpy(), std.numpy())


def describe_sources(flights: Seq[Flight]) -> list[dict[str, Any]]:
    """Short description of the flights (name, source, dataset, samples) for checkpoints."""
    out = []
    for s in flights:
        meta = getattr(s, "metadata", {}) or {}
        out.append(
            {"name": s.name, "source": str(meta.get("source", "")), "dataset": str(meta.get("dataset", ""))}
            | {"samples": len(s.t)}
        )
    return out
