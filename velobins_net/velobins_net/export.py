"""Export to TorchScript and ONNX for deployment without the Python package.

Both exports trace the model's own forward inside :class:`ExportWrapper` (gradient-free, so the
derived weights of its fast paths, the precomputed bin encodings among them, are baked in as
constants; the native kernels step aside under tracing) and return plain tensors:
``velocity (B, 3)``, ``variance (B, 3)`` and, for bin models, ``probs (B, 3, N)``.
Input: ``window (B, T, 6+K)`` raw [acc, gyro, rotor] at the model rate (normalisation inside).
The Table I baselines (:mod:`velobins_net.baselines`) export through :class:`BaselineExportWrapper`:
input ``window (B, T, 6+K+9)`` (the attitude R row-major last), outputs ``velocity`` (AirIO) or
``displacement`` (TLIO, EqNIO, IMO), ``variance`` and, for EqNIO, ``covariance (B, 3, 3)``.

:func:`check_parity` runs an exported file (TorchScript through ``torch.jit``, ONNX through
onnxruntime) on random windows and compares every output with the PyTorch model: the check the
tests do, made available to ``velobins export`` so a user's export is verified where it is made.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from velobins_common.errors import OptionError
from velobins_common.fields import param

from . import accel
from .model import VeloBinsNet


class ExportWrapper(nn.Module):
    """Tensor-only interface of a :class:`VeloBinsNet` in eval mode.

    ``uncertainty``: the reported variance source baked into the export (None: the model config's).
    """

    def __init__(self, model: VeloBinsNet, uncertainty: str | None = None):
        super().__init__()
        self.model = model.eval()
        self.has_bins = model.bins is not None
        self.has_disagreement = hasattr(model, "members")  # an ensemble (velobins_net.ensemble)
        self.uncertainty = uncertainty or model.cfg.uncertainty
        with torch.no_grad(), accel.eager():  # derives the fast paths' weights: constants in a trace, not ops
            model(_example(model), self.uncertainty)

    def forward(self, window: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """window (B, T, 6+K) → (velocity, variance[, probs][, disagreement]): an ensemble also gives its members'
        disagreement, which a deployment averages and weighs as ``predictor.disagreement_*`` say."""
        out = self.model(window, self.uncertainty)
        outputs = (out.v, out.var) if out.logits is None else (out.v, out.var, torch.softmax(out.logits, dim=-1))
        return (*outputs, out.disagreement) if self.has_disagreement else outputs

    def output_names(self) -> list[str]:
        """Names of the outputs, in order."""
        names = ["velocity", "variance", "probs"] if self.has_bins else ["velocity", "variance"]
        return [*names, "disagreement"] if self.has_disagreement else names


class BaselineExportWrapper(nn.Module):
    """Tensor-only interface of a Table I baseline in eval mode (its own forward, traced as it is)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model.eval()
        self.has_cov = model.cfg.method == "eqnio"
        self.first = "displacement" if model.cfg.output_kind == "displacement" else "velocity"

    def forward(self, window: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """window (B, T, 6+K+9) → (velocity or displacement, variance[, covariance])."""
        out = self.model(window)
        return (out.v, out.var, out.cov) if self.has_cov else (out.v, out.var)

    def output_names(self) -> list[str]:
        """Names of the outputs, in order."""
        return [self.first, "variance", *(["covariance"] if self.has_cov else [])]


def export_wrapper(model: nn.Module, uncertainty: str | None = None) -> ExportWrapper | BaselineExportWrapper:
    """The export interface of ``model``: :class:`ExportWrapper` (VeloBins, AI-IO) or :class:`BaselineExportWrapper`."""
    if model.cfg.method != "velobins":
        return BaselineExportWrapper(model)
    return ExportWrapper(model, uncertainty)


def _example(model: VeloBinsNet, batch: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random windows; for attitude-input models the attitude channels hold random rotations."""
    cfg = model.cfg
    window = torch.randn(batch, cfg.window_len, cfg.input_channels, generator=generator)
    if cfg.attitude_input:
        q = torch.randn(batch, 1, 4, generator=generator)
        x, y, z, w = (q / q.norm(dim=-1, keepdim=True)).unbind(-1)
        rot = torch.stack(
            [
                1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y),
            ],
            -1,
        )  # fmt: skip
        window[..., cfg.sensor_channels :] = rot.expand(batch, cfg.window_len, 9)
    return window


def export_torchscript(model: VeloBinsNet, path: str | Path) -> Path:
    """Trace the eval-mode model to a TorchScript file (any batch size)."""
    path = Path(path)
    wrapper = export_wrapper(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit: deprecated upstream, still libtorch's format
        traced = torch.jit.trace(wrapper, (_example(model, 2),), check_trace=False)
    traced.save(str(path))
    return path


def export_onnx(model: VeloBinsNet, path: str | Path, opset: int = 17) -> Path:
    """Export the eval-mode model to ONNX with a dynamic batch axis (TorchScript-based exporter)."""
    path = Path(path)
    wrapper = export_wrapper(model)
    names = wrapper.output_names()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter needs no onnxscript
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        try:
            torch.onnx.export(
                wrapper,
                (_example(model, 2),),
                str(path),
                input_names=["window"],
                output_names=names,
                dynamic_axes={n: {0: "batch"} for n in ["window", *names]},
                opset_version=opset,
                dynamo=False,
            )
        except torch.onnx.errors.OnnxExporterError as exc:  # an operator this opset lacks (UnsupportedOperatorError)
            reason = " ".join(str(exc).split()).split(". ")[0]
            raise OptionError("--opset", f"{opset} cannot express this model ({reason})") from None
    return path


FORMATS = ("torchscript", "onnx")
"""Export formats: TorchScript (libtorch, C++ or Python) and ONNX (onnxruntime, TensorRT, ...)."""


@dataclass(frozen=True)
class ExportConfig:
    """How an export is made and verified (``velobins export`` options are generated from it)."""

    opset: int = param(17, min=14, max=20)
    """ONNX opset version (ignored for TorchScript): 14 is the first with the transformer's attention
    operator, 20 the last that torch's TorchScript-based exporter supports."""
    parity_batch: int = 5
    """Random windows in the parity check; not the traced batch (2), so the dynamic batch axis is checked too."""
    parity_seed: int = 0
    """Seed of the parity check's random windows."""
    rtol: float = 1e-4
    """Parity tolerance, relative part: an output passes where |exported - PyTorch| <= atol + rtol |PyTorch|."""
    atol: float = 1e-5
    """Parity tolerance, absolute part (m/s for velocity, m^2/s^2 for variance, 1 for probabilities)."""


@dataclass(frozen=True)
class ParityResult:
    """Exported vs PyTorch outputs on the same random windows.

    Attributes:
        max_abs: largest |exported - PyTorch| per output name.
        passed: every element within ``atol + rtol |PyTorch|``.
        batch: number of windows compared.
    """

    max_abs: dict[str, float]
    passed: bool
    batch: int

    @property
    def max_deviation(self) -> float:
        """Largest absolute deviation over all outputs."""
        return max(self.max_abs.values())


def export_model(model: VeloBinsNet, path: str | Path, fmt: str, cfg: ExportConfig = ExportConfig()) -> Path:
    """Export ``model`` to ``path`` in format ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "torchscript":
        return export_torchscript(model, path)
    if fmt == "onnx":
        return export_onnx(model, path, opset=cfg.opset)
    raise ValueError(f"export format must be one of {FORMATS}, got {fmt!r}")


def run_exported(path: str | Path, fmt: str, window: np.ndarray) -> list[np.ndarray]:
    """Outputs of the exported file at ``path`` on ``window`` (B, T, 6+K), as numpy arrays."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
        with torch.no_grad():
            return [t.numpy() for t in module(torch.from_numpy(window))]
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return list(session.run(None, {"window": window}))
    raise ValueError(f"export format must be one of {FORMATS}, got {fmt!r}")


def check_parity(model: VeloBinsNet, path: str | Path, fmt: str, cfg: ExportConfig = ExportConfig()) -> ParityResult:
    """Compare the export at ``path`` with ``model`` on ``cfg.parity_batch`` random windows."""
    model = model.eval()
    gen = torch.Generator().manual_seed(cfg.parity_seed)
    window = _example(model, cfg.parity_batch, gen)
    with torch.no_grad():
        ref = model(window)
    names = export_wrapper(model).output_names()
    expected = [ref.v, ref.var] + ([torch.softmax(ref.logits, dim=-1)] if ref.logits is not None else [])
    expected += [ref.cov] if ref.cov is not None else []
    expected += [ref.disagreement] if ref.disagreement is not None else []
    got = run_exported(path, fmt, window.numpy())
    if len(got) != len(expected):
        raise ValueError(f"{path}: the export returns {len(got)} outputs, the model {len(expected)}")
    max_abs: dict[str, float] = {}
    passed = True
    for name, want, have in zip(names, expected, got, strict=True):
        want_np = want.numpy().astype(np.float64)
        if have.shape != want_np.shape:
            raise ValueError(f"{path}: output '{name}' has shape {have.shape}, the model's {want_np.shape}")
        diff = np.abs(have.astype(np.float64) - want_np)
        max_abs[name] = float(np.max(diff, initial=0.0))
        passed &= bool(np.all(diff <= cfg.atol + cfg.rtol * np.abs(want_np)))  # NaN fails
    return ParityResult(max_abs=max_abs, passed=passed, batch=cfg.parity_batch)
