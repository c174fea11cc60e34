"""Training-time augmentation of raw input windows: what a new vehicle's sensors do that few flights show.

A network trained on a few minutes of one vehicle sees one IMU (its noise, its biases) and one set of rotor
constants. On the vehicle's next flight the accelerometer and gyro biases have drifted and a motor or a battery
changes the rotor signal's scale; a network that learned the exact signal is over-confident there. Each
training window therefore gets, on its raw channels and before the model's normalisation:

- acc and gyro: a constant bias per window, N(0, ``*_bias``²) per axis, plus white noise per sample,
  N(0, ``*_noise``²) (standard deviations at the model rate, in m/s² and rad/s);
- the rotor channels: one common factor per window, exp(N(0, ``rotor_scale``²)), the same for every rotor
  (a battery or a propeller set changes them together; the network's information is in their differences
  and their time course).

The targets (body velocity) are left as they are: these are sensor effects, not motion. Time warping is not
done here: stretching a window changes the motion it shows, so the target would have to change with it.

Augmentation is off (all zero) in the paper's recipe; ``velobins train --aug-*`` and the recipes of
:data:`velobins_net.schedule.RECIPES` set it. The draws come from torch's global generator, which
``velobins_net.train`` seeds and checkpoints, so a run stays reproducible and resumable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from velobins_common.fields import param

ACC = slice(0, 3)
GYRO = slice(3, 6)
ROTOR_START = 6
"""Raw input layout of a window (:func:`velobins_net.data.flight_arrays`): acc, gyro, then K rotor channels."""


@dataclass(frozen=True)
class Augmentation:
    """Standard deviations of the augmentation draws (0 = that part off).

    Attributes:
        acc_noise: white noise per sample on the accelerometer [m/s²].
        acc_bias: constant accelerometer bias per window [m/s²].
        gyro_noise: white noise per sample on the gyro [rad/s].
        gyro_bias: constant gyro bias per window [rad/s].
        rotor_scale: log-normal σ of one rotor-signal factor per window (0.1 ≈ ±10 %).
    """

    acc_noise: float = param(0.0, min=0.0)
    acc_bias: float = param(0.0, min=0.0)
    gyro_noise: float = param(0.0, min=0.0)
    gyro_bias: float = param(0.0, min=0.0)
    rotor_scale: float = param(0.0, min=0.0, max=1.0)

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (value >= 0.0 and value < float("inf")):
                raise ValueError(f"Augmentation.{name}: must be finite and >= 0, got {value}")

    @property
    def active(self) -> bool:
        """Whether any draw is non-zero."""
        return any(value > 0.0 for value in vars(self).values())


def augment_windows(x: torch.Tensor, aug: Augmentation, num_rotors: int) -> torch.Tensor:
    """A new (B, T, C) batch of raw windows with ``aug``'s draws applied (``x`` is left as it is).

    Only the acc, gyro and ``num_rotors`` rotor channels change; further channels (a baseline's attitude) are
    copied.
    """
    if not aug.active:
        return x
    out = x.clone()
    batch, length = x.shape[0], x.shape[1]
    for part, noise, bias in ((ACC, aug.acc_noise, aug.acc_bias), (GYRO, aug.gyro_noise, aug.gyro_bias)):
        if bias > 0.0:
            out[:, :, part] += bias * torch.randn(batch, 1, 3, dtype=x.dtype, device=x.device)
        if noise > 0.0:
            out[:, :, part] += noise * torch.randn(batch, length, 3, dtype=x.dtype, device=x.device)
    if aug.rotor_scale > 0.0 and num_rotors > 0:
        factor = torch.exp(aug.rotor_scale * torch.randn(batch, 1, 1, dtype=x.dtype, device=x.device))
        out[:, :, ROTOR_START : ROTOR_START + num_rotors] *= factor
    return out
