"""Configuration records and the constants of the method (one source of truth).

Every number that the paper fixes (§III, "Implementation Details") lives here once; the rest of
the package imports it. Configurations are frozen dataclasses so a checkpoint can store them as a
plain dict and compare them field by field when it is loaded or resumed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from velobins_common.constants import ROTOR_COMMAND, canonical_rotor_kind
from velobins_common.fields import param

# ----------------------------------------------------------------------------- paper constants
HUBER_DELTA = 0.1
"""Huber transition point δ [m/s] (§III-D, eq:huber; Implementation Details)."""

LAMBDA_HUBER = 1.0
"""Weight λ_H of the Huber term (eq:total_loss)."""

LAMBDA_KL = 1.0
"""Weight λ_KL of the KL term (eq:total_loss)."""

SIGMA_MIN_BIN_FRACTION = 0.1
"""Label σ is clamped to at least this fraction of a bin width (Implementation Details)."""

RANGE_MARGIN = 1.1
"""R = RANGE_MARGIN × the training set's axis-wise max |body velocity| (Implementation Details)."""

MIN_LOG_STD = math.log(1e-3)
"""Floor of a predicted log σ in the Gaussian NLL of TLIO, EqNIO, IMO and AI-IO (their ``losses.py``:
``MIN_LOG_STD = np.log(1e-3)``; the loss uses max(log σ, floor), so no gradient pushes σ below 1 mm)."""

AIIO_FILTER_MIN_LOG_STD = -4.0
"""AI-IO's floor on the log σ it hands to the filter (``meas_source_network.py``: log σ < −4 → −4,
σ² ≥ e⁻⁸ ≈ 3.4·10⁻⁴): the regression baseline's reported variance (``decoders.covariance_variance``)."""

CHECKPOINT_FORMAT_VERSION = 2
"""Bumped whenever the checkpoint layout changes. 2: rotor kinds ``speed``/``command``; version 1
(``rpm``/``pwm``, the shipped models) is read and renamed by :func:`velobins_net.checkpoint.read_checkpoint`."""

MAX_MEMBERS = 16
"""Most members an ensemble may hold (each member is a full network run on every window): the bound of an ensemble
checkpoint's ``members`` when it is read (:mod:`velobins_net.ensemble`) and of ``TrainConfig.members``."""

BIN_ENCODINGS = ("direct", "pe", "spe")
"""Bin encodings of the bin decoder (§III-B, §V-D "Bin Encoding")."""

METHODS = ("velobins", "tlio", "eqnio", "imo", "airio")
"""Network families (paper Table I). ``velobins`` is :class:`velobins_net.model.VeloBinsNet` (the bin
decoder, or with ``head="reg"`` the AI-IO regression baseline); the others are the baselines of
:mod:`velobins_net.baselines`."""

BASELINE_METHODS = tuple(m for m in METHODS if m != "velobins")
"""The Table I baselines with a network and loss of their own (:mod:`velobins_net.baselines`)."""

DISPLACEMENT_METHODS = ("tlio", "eqnio", "imo")
"""Methods that regress the displacement over the window, in the gravity-aligned frame of the
window's first sample (:mod:`velobins_ekf.displacement`), instead of the body velocity at its last."""

ATTITUDE_METHODS = ("tlio", "eqnio", "imo", "airio")
"""Methods whose input needs the body->world attitude of every window sample (ground truth in
training, the filter's estimate at inference): 9 more raw channels, R row-major."""

ATTITUDE_CHANNELS = 9
"""Raw channels of the attitude input: the body->world rotation matrix, row-major."""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the network (§III-B) plus the input contract (window, rate, rotors).

    Default widths give 69.8 k encoder parameters for K = 4 rotors (see :mod:`encoder`).

    Attributes:
        num_rotors: K, rotor channels of the input.
        rotor_kind: ``"speed"`` (rad/s, fed as squared speed) or ``"command"`` (normalised command, raw);
            an old name (``"rpm"``, ``"pwm"``) becomes its new one.
        window_s: input window length [s] (paper: 1 s).
        rate_hz: network input rate [Hz] (paper: 100 Hz).
        update_rate_hz: kept so checkpoints keep one format; the streaming update rate is
            ``velobins_net.inference.PredictorConfig.update_rate`` (the node's ``predictor.*``).
        d_model: transformer width = D_h, the last-step feature size (paper: 48).
        conv_channels: output channels of each per-modality convolution branch.
        conv_kernel: kernel size of the branch convolutions (odd, 'same' padding).
        num_heads: attention heads.
        ffn_dim: transformer feed-forward width.
        num_layers: transformer layers (paper: 2).
        head: ``"bins"`` (VeloBins) or ``"reg"`` (AI-IO regression baseline).
        num_bins: N bins per axis (paper: 512).
        bin_encoding: ``"direct"``, ``"pe"`` or ``"spe"``.
        enc_channels: C, channels of the (learnable) sine positional encoding (paper: 64).
        enc_dim: D, projected bin-encoding size (paper: 32).
        cov_head: add the log-σ covariance decoder beside the bins (M and B+C variants).
        uncertainty: ``"B"``, ``"C"`` or ``"B+C"``: the variance the model reports by default (the
            variant it was trained as). The source is an inference-time choice: ``VeloBinsNet.forward``,
            ``StreamingPredictor`` and ``ExportWrapper`` take ``uncertainty=`` per call.
        velocity_range: R [m/s]; bins span [−R, R] on every axis.
        method: network family, one of :data:`METHODS` (checkpoints without it are ``velobins``).
        baseline_width: channel-width multiplier of a Table I baseline's network (1 = its published
            widths; the CPU reproduction schedule uses less, :mod:`velobins_eval.reproduce.plan`).
        frame_width: EqNIO only: width multiplier of its canonical-frame network (1 = published; its
            kernel-32 equivariant convolutions dominate its cost, so the CPU schedule shrinks it most).
    """

    # Ranges: what a checkpoint may claim (checked before a model is built: issue 24); far beyond
    # the paper's sizes, small enough that the largest allowed model still fits in memory.
    num_rotors: int = param(4, min=1, max=16)
    rotor_kind: str = ROTOR_COMMAND  # old names are aliases: __post_init__ makes them canonical
    window_s: float = param(1.0, min=0.01, max=10.0)
    rate_hz: float = param(100.0, min=1.0, max=2000.0)
    update_rate_hz: float = param(20.0, min=0.1, max=1000.0)
    d_model: int = param(48, min=1, max=512)
    conv_channels: int = param(16, min=1, max=512)
    conv_kernel: int = param(5, min=1, max=63)
    num_heads: int = param(4, min=1, max=64)
    ffn_dim: int = param(224, min=1, max=4096)
    num_layers: int = param(2, min=1, max=16)
    head: str = param("bins", choices=("bins", "reg"))
    num_bins: int = param(512, min=2, max=8192)
    bin_encoding: str = param("spe", choices=BIN_ENCODINGS)
    enc_channels: int = param(64, min=4, max=1024)
    enc_dim: int = param(32, min=1, max=1024)
    cov_head: bool = False
    uncertainty: str = param("B", choices=("B", "C", "B+C"))
    velocity_range: float = param(5.0, min=1e-3, max=100.0)
    method: str = param("velobins", choices=METHODS)
    baseline_width: float = param(1.0, min=0.01, max=4.0)
    frame_width: float = param(1.0, min=0.01, max=4.0)

    def __post_init__(self) -> None:
        def bad(field_name: str, why: str) -> ValueError:
            return ValueError(f"ModelConfig.{field_name}: {why}")

        if self.method not in METHODS:
            raise bad("method", f"must be one of {METHODS}, got {self.method!r}")
        if self.method != "velobins" and (self.head != "reg" or self.uncertainty != "C"):
            raise bad("head", f"method {self.method!r} has its own covariance head: needs head='reg', uncertainty='C'")
        for name in ("baseline_width", "frame_width"):
            if not 0.0 < getattr(self, name) <= 4.0:
                raise bad(name, f"must be in (0, 4], got {getattr(self, name)}")
        try:
            object.__setattr__(self, "rotor_kind", canonical_rotor_kind(self.rotor_kind))
        except ValueError as exc:
            raise bad("rotor_kind", str(exc)) from None
        if self.num_rotors < 1:
            raise bad("num_rotors", f"must be >= 1, got {self.num_rotors}")
        if self.window_len < 2:
            raise bad("window_s", f"window of {self.window_s} s at {self.rate_hz} Hz has < 2 samples")
        if self.head not in ("bins", "reg"):
            raise bad("head", f"must be 'bins' or 'reg', got {self.head!r}")
        if self.bin_encoding not in BIN_ENCODINGS:
            raise bad("bin_encoding", f"must be one of {BIN_ENCODINGS}, got {self.bin_encoding!r}")
        if self.num_bins < 2:
            raise bad("num_bins", f"must be >= 2, got {self.num_bins}")
        if self.d_model % self.num_heads:
            raise bad("num_heads", f"d_model={self.d_model} is not divisible by {self.num_heads}")
        if self.conv_kernel % 2 != 1:
            raise bad("conv_kernel", f"must be odd for 'same' padding, got {self.conv_kernel}")
        if self.uncertainty not in ("B", "C", "B+C"):
            raise bad("uncertainty", f"must be 'B', 'C' or 'B+C', got {self.uncertainty!r}")
        if self.head == "reg" and self.uncertainty != "C":
            raise bad("uncertainty", "the regression head only has a covariance decoder ('C')")
        if self.head == "bins" and "C" in self.uncertainty and not self.cov_head:
            raise bad("uncertainty", f"{self.uncertainty!r} needs cov_head=True")
        if not self.velocity_range > 0:
            raise bad("velocity_range", f"must be > 0, got {self.velocity_range}")

    @property
    def window_len(self) -> int:
        """Samples per window, T = round(window_s × rate_hz)."""
        return round(self.window_s * self.rate_hz)

    @property
    def attitude_input(self) -> bool:
        """Whether the raw window carries the attitude (R row-major) after the rotor channels."""
        return self.method in ATTITUDE_METHODS

    @property
    def output_kind(self) -> str:
        """``"displacement"`` (TLIO, EqNIO, IMO) or ``"velocity"`` (body velocity: VeloBins, AI-IO, AirIO)."""
        return "displacement" if self.method in DISPLACEMENT_METHODS else "velocity"

    @property
    def sensor_channels(self) -> int:
        """acc (3) + gyro (3) + rotor (K): the channels that are normalised."""
        return 6 + self.num_rotors

    @property
    def input_channels(self) -> int:
        """Raw input channels: acc (3) + gyro (3) + rotor (K) [+ attitude R row-major (9)]."""
        return self.sensor_channels + (ATTITUDE_CHANNELS if self.attitude_input else 0)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for checkpoints."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>") -> ModelConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error naming ``source``."""
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"{source}: unknown ModelConfig fields {sorted(unknown)}")
        return cls(**d)


def config_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Human-readable list of fields where two config dicts differ (for clear mismatch errors)."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k, '<missing>')!r} != {b.get(k, '<missing>')!r}" for k in keys if a.get(k) != b.get(k)]
