"""Checkpoint loading and the streaming predictor used by the network node.

:class:`StreamingPredictor` accepts IMU samples (t, acc, gyro) and rotor samples (t, values) at
their own rates, keeps them in ring buffers, and at most at the configured update rate
(paper: 20 Hz, on a grid of IMU time: :func:`next_update_slot`) resamples the last window onto
the network's time grid ending at the latest IMU stamp (:func:`velobins_net.resample.to_model_grid`,
the resampling training uses: anti-alias FIR above the model rate, then linear interpolation;
rotor interpolated inside its samples and held beyond them) and runs the network. The reported
variance is the decoded one times ``variance_scale``; for an ensemble (:mod:`velobins_net.ensemble`) plus
``disagreement_scale`` times its members' disagreement averaged over ``disagreement_tau``; then, per body axis,
times ``axis_variance_factors``. Every call that does
not produce an estimate says why in ``counts``. ``velobins evaluate`` runs this same predictor over recorded
flights (:func:`velobins_eval.evaluate.predict_flight`), so offline numbers are the node's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from velobins_common.fields import param
from velobins_common.params import load_section
from velobins_common.stats import exponential_average_step

from .accel import kernel_status
from .attitude import attitude_window
from .checkpoint import MEMBERS_KEY, model_from_checkpoint, read_checkpoint
from .decoders import UNCERTAINTY_SOURCES, check_uncertainty
from .ensemble import ensemble_from_checkpoint
from .model import VeloBinsNet
from .resample import antialias_warmup, to_model_grid

REASONS = (
    "ok",
    "rate_limited",
    "insufficient_imu",
    "no_rotor",
    "rotor_stale",
    "no_attitude",
    "out_of_order",
    "non_finite",
)
"""Outcome names counted by :class:`StreamingPredictor`."""


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> VeloBinsNet:
    """Model in eval mode from a checkpoint written by :func:`velobins_net.train.train`, or the
    :class:`~velobins_net.ensemble.EnsembleNet` of one written by ``velobins ensemble``."""
    ckpt = read_checkpoint(path, map_location=device)
    if MEMBERS_KEY in ckpt:
        return ensemble_from_checkpoint(ckpt, path).to(device)
    return model_from_checkpoint(ckpt, path).to(device)


@dataclass(frozen=True)
class Prediction:
    """One network estimate.

    Attributes:
        stamp: time of the window's last sample (the latest IMU stamp) [s].
        measurement: (3,) what the network measures, by ``kind``: the body-frame velocity v̂ [m/s]
            (VeloBins, AI-IO, AirIO), or the displacement over [t_start, stamp] in the
            gravity-aligned frame of t_start [m] (TLIO, EqNIO, IMO). :attr:`velocity` and
            :attr:`displacement` name it and refuse the other kind.
        variance: (3,) its variance σ̂² [m²/s² or m²] (the diagonal of ``covariance``).
        probs: (3, N) bin distribution π, or None (not requested / regression model).
        kind: ``"velocity"`` or ``"displacement"`` (``ModelConfig.output_kind``).
        t_start: time of the window's first sample [s].
        covariance: (3, 3) full covariance when the method predicts one (EqNIO), else None (diagonal).
        disagreement: (3,) an ensemble's disagreement averaged over ``disagreement_tau`` (what
            ``disagreement_scale`` weighs), or None for a single network.
    """

    stamp: float
    measurement: np.ndarray
    variance: np.ndarray
    probs: np.ndarray | None = None
    kind: str = "velocity"
    t_start: float = float("nan")
    covariance: np.ndarray | None = None
    disagreement: np.ndarray | None = None

    @property
    def velocity(self) -> np.ndarray:
        """(3,) body-frame velocity v̂ [m/s] of a velocity method (ValueError for a displacement method)."""
        return self._measurement_of("velocity")

    @property
    def displacement(self) -> np.ndarray:
        """(3,) displacement [m] over [t_start, stamp] of a displacement method (ValueError otherwise)."""
        return self._measurement_of("displacement")

    def _measurement_of(self, kind: str) -> np.ndarray:
        if self.kind != kind:
            raise ValueError(f"Prediction: this model measures {self.kind}, not {kind} (read .measurement)")
        return self.measurement

    def covariance_matrix(self) -> np.ndarray:
        """(3, 3) covariance: ``covariance`` when given, else diag(``variance``)."""
        return self.covariance if self.covariance is not None else np.diag(self.variance)


def next_update_slot(last_slot: float | None, t: float, sample_dt: float, period: float) -> float | None:
    """Scheduled IMU time (slot) of the network update due at IMU stamp ``t``, or None if none is due.

    Updates sit on a grid of IMU time, slot_{n+1} = slot_n + ``period``, so jittered stamps do not
    stretch the rate: an update is due at the first sample no earlier than its slot minus half a
    sample (``sample_dt`` / 2, the interval to the previous sample; at most a quarter period), which
    for a steady stream is the sample nearest the slot. A sample later than its slot by more than
    half a period (a gap in the stream, or windows refused for lack of data) re-anchors the grid at
    that sample; so consecutive updates are never closer than half a period. The first update
    (``last_slot`` None) anchors the grid at ``t``. The one schedule of the node and of offline
    evaluation (both run :class:`StreamingPredictor`).
    """
    if last_slot is None:
        return t
    due = last_slot + period
    if t < due - min(0.5 * sample_dt, 0.25 * period):
        return None
    return due if t - due <= 0.5 * period else t


class _Ring:
    """Append-only time-stamped buffer keeping at least ``keep`` rows (amortised O(1) append).

    ``trimmed`` tells whether old rows were ever dropped (the buffer no longer starts at the stream's start).
    """

    def __init__(self, width: int, keep: int):
        self.keep = keep
        self.t = np.empty(2 * keep)
        self.x = np.empty((2 * keep, width))
        self.n = 0
        self.trimmed = False

    def append(self, t: float, x: np.ndarray) -> None:
        if self.n == len(self.t):
            self.t[: self.keep] = self.t[self.n - self.keep : self.n]
            self.x[: self.keep] = self.x[self.n - self.keep : self.n]
            self.n = self.keep
            self.trimmed = True
        self.t[self.n] = t
        self.x[self.n] = x
        self.n += 1

    @property
    def last_t(self) -> float | None:
        return float(self.t[self.n - 1]) if self.n else None

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self.t[: self.n], self.x[: self.n]

    def covers(self, start: float, rate_out: float) -> bool:
        """Whether the rows give the values the whole stream would from ``start`` on: resampled
        from ``start`` with the anti-alias filter's warm-up before it (always true before a trim)."""
        if not self.trimmed:
            return True
        t = self.t[: self.n]
        return bool(t[0] <= start - antialias_warmup(t, rate_out))


@dataclass(frozen=True)
class PredictorConfig:
    """How the network runs on a stream: the one source of the runtime settings.

    The network node declares these as its ``predictor.*`` parameters and ``velobins evaluate``
    reads the same ``velobins_net: ros__parameters: predictor:`` entries from the same YAML files
    (:func:`load_predictor_config`), so offline numbers are the node's numbers.
    """

    update_rate: float = param(20.0, min=0.1, max=1000.0, live=True)
    """Network updates per second of IMU time [Hz] (paper: 20)."""
    max_rotor_age: float = param(0.1, min=0.001, max=10.0, live=True)
    """Newest rotor sample may lag the newest IMU sample by at most this much [s]; else no estimate."""
    max_imu_rate: float = param(1000.0, min=1.0, max=100000.0)
    """Highest expected IMU/rotor rate [Hz]; sizes the ring buffers (window + 0.5 s)."""
    uncertainty: str = param("", choices=("", *UNCERTAINTY_SOURCES), live=True)
    """Reported variance source: B (bins), C (covariance decoder) or B+C; empty = the variant the
    checkpoint was trained as."""
    variance_scale: float = param(1.0, min=1e-6, max=1e6, live=True)
    """Factor on the reported (decoded) variance, the covariance handed to the EKF. 1 = the paper's
    unscaled bin variance (reproduction); `velobins calibrate` can fit it on held-out flights."""
    disagreement_scale: float = param(0.0, min=0.0, max=1e6, live=True)
    """Ensembles only: factor b on the members' disagreement, smoothed over `disagreement_tau`, added to the
    scaled variance (R = s·σ̂² + b·d̄). 0 = the mixture's decoded variance alone; `velobins calibrate --fit
    variance_scale,disagreement_scale` fits it on held-out flights. No effect for a single network."""
    disagreement_tau: float = param(2.0, min=0.0, max=600.0, live=True)
    """Time constant [s] of the causal average of the disagreement that `disagreement_scale` weighs (0 = each
    window's own): a flight-segment's difficulty, not one window's draw."""
    axis_variance_factors: tuple[float, ...] = param((1.0, 1.0, 1.0), min=1e-6, max=1e6, live=True)
    """Factors (x, y, z) per axis of the measurement (the body axes of a velocity network) on the reported variance
    after `variance_scale` and the disagreement (R_i = k_i·(s·σ̂²_i + b·d̄_i)): where the network's σ̂ follows its
    errors over time but misjudges the balance of its axes. 1, 1, 1 = none; `velobins calibrate --fit
    ...,axis_variance_factors` fits them on held-out flights with s and b held."""
    max_attitude_age: float = param(0.1, min=0.001, max=10.0, live=True)
    """Baselines with attitude input (TLIO, EqNIO, IMO, AirIO): the newest filter attitude may lag the
    newest IMU sample by at most this much [s] (it is carried forward with the gyro); else no estimate."""

    def __post_init__(self) -> None:
        for name in ("update_rate", "max_rotor_age", "max_imu_rate", "variance_scale", "max_attitude_age"):
            if not getattr(self, name) > 0:
                raise ValueError(f"PredictorConfig.{name}: must be > 0, got {getattr(self, name)!r}")
        for name in ("disagreement_scale", "disagreement_tau"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"PredictorConfig.{name}: must be >= 0, got {getattr(self, name)!r}")
        factors = self.axis_variance_factors
        if len(factors) != 3 or not all(k > 0 for k in factors):
            raise ValueError(f"PredictorConfig.axis_variance_factors: must be 3 factors > 0 (x, y, z), got {factors!r}")
        if self.uncertainty and self.uncertainty not in UNCERTAINTY_SOURCES:
            raise ValueError(
                f"PredictorConfig.uncertainty: must be empty or one of {UNCERTAINTY_SOURCES}, got {self.uncertainty!r}"
            )


PARAMS_NODE, PARAMS_SECTION = "velobins_net", "predictor"
"""Where :class:`PredictorConfig` lives in a ROS parameter file."""


def load_predictor_config(params_files=None) -> PredictorConfig:
    """:class:`PredictorConfig` defaults plus the ``velobins_net: ros__parameters: predictor:``
    overrides of ROS parameter files (the files the network node loads), applied in order."""
    return load_section(params_files, PARAMS_NODE, PARAMS_SECTION, PredictorConfig())


class StreamingPredictor:
    """Windowed, rate-limited inference on live IMU and rotor streams.

    Args:
        model: network (eval mode is enforced).
        config: update rate, rotor staleness bound, buffer sizing, uncertainty source and variance scale.
        return_probs: include the bin distribution in each :class:`Prediction`.
    """

    def __init__(self, model: VeloBinsNet, config: PredictorConfig | None = None, return_probs: bool = False):
        config = config or PredictorConfig()
        self.config = config
        self.model = model.eval()
        cfg = model.cfg
        self.uncertainty = config.uncertainty or cfg.uncertainty
        check_model_uncertainty(model, self.uncertainty)
        self.window_len = cfg.window_len
        self.rate_hz = cfg.rate_hz
        self.period = 1.0 / config.update_rate
        self.max_rotor_age = config.max_rotor_age
        self.return_probs = return_probs and bin_decoder(model) is not None
        keep = int(np.ceil((cfg.window_s + 0.5) * config.max_imu_rate)) + 8
        self._imu = _Ring(6, keep)
        self._rotor = _Ring(cfg.num_rotors, keep)
        self.needs_attitude = cfg.attitude_input
        self.kind = cfg.output_kind
        self._attitude = _Ring(4, keep)
        self._offsets = (np.arange(self.window_len) - (self.window_len - 1)) / self.rate_hz
        self._last_slot: float | None = None
        self._disagreement: tuple[float, np.ndarray] | None = None  # (stamp, its running average)
        self.counts: Counter[str] = Counter()
        self._device = next(model.parameters()).device
        if self._device.type == "cpu":
            kernel_status()  # build/load the native kernels now, not inside the first window's callback

    def set_config(self, config: PredictorConfig) -> None:
        """Apply a changed update rate, rotor staleness bound, uncertainty source or variance scale from now on,
        keeping the buffered window (``max_imu_rate`` sizes the buffers: it needs a new predictor).

        Raises ``ValueError`` (and changes nothing) when the model cannot give the uncertainty."""
        if config.max_imu_rate != self.config.max_imu_rate:
            raise ValueError("StreamingPredictor.set_config: max_imu_rate sizes the buffers; build a new predictor")
        uncertainty = config.uncertainty or self.model.cfg.uncertainty
        check_model_uncertainty(self.model, uncertainty)
        self.config = config
        self.uncertainty = uncertainty
        self.period = 1.0 / config.update_rate
        self.max_rotor_age = config.max_rotor_age

    def push_imu(self, t: float, acc: np.ndarray, gyro: np.ndarray) -> bool:
        """Add one IMU sample (body specific force [m/s²], angular rate [rad/s]); False if rejected."""
        row = np.concatenate([np.asarray(acc, dtype=np.float64), np.asarray(gyro, dtype=np.float64)])
        if row.shape != (6,) or not np.all(np.isfinite(row)) or not np.isfinite(t):
            self.counts["non_finite"] += 1
            return False
        last = self._imu.last_t
        if last is not None and t <= last:
            self.counts["out_of_order"] += 1
            return False
        self._imu.append(float(t), row)
        return True

    def push_rotor(self, t: float, values: np.ndarray) -> bool:
        """Add one rotor sample (K values, rad/s or normalised PWM as the model was trained); False if rejected."""
        row = np.asarray(values, dtype=np.float64).reshape(-1)
        if row.shape != (self._rotor.x.shape[1],) or not np.all(np.isfinite(row)) or not np.isfinite(t):
            self.counts["non_finite"] += 1
            return False
        last = self._rotor.last_t
        if last is not None and t <= last:
            self.counts["out_of_order"] += 1
            return False
        self._rotor.append(float(t), row)
        return True

    def push_attitude(self, t: float, quat: np.ndarray) -> bool:
        """Add one body->world attitude estimate (x, y, z, w) of the filter (what methods with attitude
        input read, :attr:`needs_attitude`); False if rejected. A stamp not after the newest replaces nothing."""
        q = np.asarray(quat, dtype=np.float64).reshape(-1)
        if q.shape != (4,) or not np.all(np.isfinite(q)) or not np.isfinite(t) or not np.linalg.norm(q) > 0:
            self.counts["non_finite"] += 1
            return False
        last = self._attitude.last_t
        if last is not None and t <= last:
            return False
        self._attitude.append(float(t), q / np.linalg.norm(q))
        return True

    def window(self) -> tuple[float, np.ndarray] | str:
        """(stamp, (T, 6+K[+9]) window) on the grid ending at the latest IMU stamp, or the reason why not."""
        t_imu, x_imu = self._imu.view()
        if len(t_imu) < 2:
            return "insufficient_imu"
        stamp = float(t_imu[-1])
        grid = stamp + self._offsets
        if t_imu[0] > grid[0] + 1e-9 or not self._imu.covers(grid[0], self.rate_hz):
            return "insufficient_imu"
        t_rot, x_rot = self._rotor.view()
        if len(t_rot) == 0:
            return "no_rotor"
        # the newest rotor sample at or before the window end, not the newest taken: a node working through an
        # IMU backlog can take rotor samples from after a rotor gap first, and interpolating across the gap
        # would hide it (the graph's faulted-bag test saw estimates inside a 1 s rotor gap under load)
        k = int(np.searchsorted(t_rot, stamp, side="right"))
        if k == 0 or stamp - t_rot[k - 1] > self.max_rotor_age or t_rot[0] > grid[0] + self.max_rotor_age:
            return "rotor_stale"
        if not self._rotor.covers(grid[0], self.rate_hz):
            return "rotor_stale"
        imu = to_model_grid(grid, t_imu, x_imu, self.rate_hz)
        parts = [imu, to_model_grid(grid, t_rot, x_rot, self.rate_hz)]
        if self.needs_attitude:
            t_att, q_att = self._attitude.view()
            rot = attitude_window(grid, t_att, q_att, imu[:, 3:6], self.config.max_attitude_age)
            if rot is None:
                return "no_attitude"
            parts.append(rot)
        return stamp, np.concatenate(parts, axis=1)

    def step(self) -> Prediction | None:
        """Run the network if an update is due (:func:`next_update_slot`, by IMU stamps) and data
        allow it; else None (reason counted)."""
        last = self._imu.last_t
        if last is None:
            self.counts["insufficient_imu"] += 1
            return None
        n = self._imu.n
        sample_dt = last - float(self._imu.t[n - 2]) if n >= 2 else 0.0
        slot = next_update_slot(self._last_slot, last, sample_dt, self.period)
        if slot is None:
            self.counts["rate_limited"] += 1
            return None
        res = self.window()
        if isinstance(res, str):
            self.counts[res] += 1
            return None
        stamp, win = res
        self._last_slot = slot
        with torch.inference_mode():  # gradient-free: the model runs on its cached derived weights
            x = torch.from_numpy(win.astype(np.float32)).unsqueeze(0).to(self._device)
            out = self.model(x, uncertainty=self.uncertainty)
        probs = None
        if self.return_probs and out.logits is not None:
            probs = torch.softmax(out.logits[0], dim=-1).cpu().numpy()
        self.counts["ok"] += 1
        scale = self.config.variance_scale
        variance = out.var[0].cpu().numpy().astype(np.float64) * scale
        cov = None if out.cov is None else out.cov[0].cpu().numpy().astype(np.float64) * scale
        disagreement = None
        if out.disagreement is not None:  # an ensemble: R = s·σ̄² + b·d̄, d̄ the disagreement's running average
            disagreement = self._average_disagreement(stamp, out.disagreement[0].cpu().numpy())
            variance = variance + self.config.disagreement_scale * disagreement
        variance, cov = axis_scaled(variance, cov, self.config.axis_variance_factors)
        t_start = stamp + float(self._offsets[0])
        v = out.v[0].cpu().numpy().astype(np.float64)
        return Prediction(stamp, v, variance, probs, self.kind, t_start, cov, disagreement)

    def _average_disagreement(self, stamp: float, disagreement: np.ndarray) -> np.ndarray:
        """The causal average over ``disagreement_tau`` of the ensemble's disagreement, updated with this window's
        (:func:`~velobins_common.stats.exponential_average_step`); ``calibrate`` reads it from this predictor."""
        previous = self._disagreement
        value = exponential_average_step(
            None if previous is None else previous[1],
            disagreement.astype(np.float64),
            0.0 if previous is None else max(stamp - previous[0], 0.0),
            self.config.disagreement_tau,
        )
        self._disagreement = (stamp, value)
        return value


def axis_scaled(
    variance: np.ndarray, cov: np.ndarray | None, factors: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray | None]:
    """The variance (3,) times the per-axis ``factors`` k, and a full covariance (3, 3) as D·C·D with
    D = diag(√k), which scales each axis's variance by its factor and keeps the correlations; unchanged at 1, 1, 1."""
    if all(k == 1.0 for k in factors):
        return variance, cov
    k = np.asarray(factors, dtype=np.float64)
    root = np.sqrt(k)
    return variance * k, None if cov is None else cov * np.outer(root, root)


def bin_decoder(model: torch.nn.Module):
    """The model's bin decoder, or None (regression head, Table I baselines)."""
    return getattr(model, "bins", None)


def check_model_uncertainty(model: torch.nn.Module, source: str) -> None:
    """Raise ValueError unless ``model`` can report uncertainty ``source`` (B, C or B+C): the one
    check of the predictor and of the node's live parameter (baselines have their own covariance head)."""
    has_cov = model.cfg.method != "velobins" or getattr(model, "cov", None) is not None
    check_uncertainty(source, bin_decoder(model) is not None, has_cov)
