"""Export to TorchScript and ONNX for deployment without the Python package.

Both exports wrap the model in :class:`ExportWrapper`, which runs the model's own forward
functions (:func:`velobins_net.encoder.encode`, :func:`velobins_net.model.heads`) on its derived
weights (precomputed bin encodings baked in as constants) and returns plain tensors:
``velocity (B, 3)``, ``variance (B, 3)`` and, for bin models, ``probs (B, 3, N)``.
Input: ``window (B, T, 6+K)`` raw [acc, gyro, rotor] at the model rate (normalisation inside).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from .accel import map_tensors, tensor_items
from .encoder import EncoderWeights, encode
from .model import HeadWeights, VeloBinsNet, heads


class ExportWrapper(nn.Module):
    """Tensor-only interface of a :class:`VeloBinsNet` in eval mode.

    The model's derived weights are registered here as buffers, so tracers and the ONNX exporter
    see them as module state of known shape. ``uncertainty``: the reported variance source baked
    into the export (None: the model config's).
    """

    def __init__(self, model: VeloBinsNet, uncertainty: str | None = None):
        super().__init__()
        self.model = model.eval()
        self.has_bins = model.bins is not None
        self.uncertainty = uncertainty or model.cfg.uncertainty
        with torch.no_grad():
            enc = model.encoder.inference_weights(1)
            self._heads = model.inference_head_weights()
        self._enc = enc
        self._buffer_names: dict[str, str] = {}
        for path, value in [*tensor_items(enc, "enc"), *tensor_items(self._heads, "head")]:
            name = "fused_" + path.replace(".", "_")
            self.register_buffer(name, value.clone(), persistent=False)
            self._buffer_names[path] = name

    def _weights(self) -> tuple[EncoderWeights, HeadWeights]:
        """The fused weights rebuilt from this module's buffers (so tracers record them as module state)."""

        def buffer(path: str, _: torch.Tensor) -> torch.Tensor:
            return getattr(self, self._buffer_names[path])

        return map_tensors(self._enc, buffer, "enc"), map_tensors(self._heads, buffer, "head")

    def forward(self, window: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """window (B, T, 6+K) → (velocity, variance[, probs])."""
        enc, head_weights = self._weights()
        out = heads(encode(window, enc), head_weights, self.uncertainty)
        if out.logits is None:
            return out.v, out.var
        return out.v, out.var, torch.softmax(out.logits, dim=-1)

    def output_names(self) -> list[str]:
        """Names of the outputs, in order."""
        return ["velocity", "variance", "probs"] if self.has_bins else ["velocity", "variance"]


def _example(model: VeloBinsNet, batch: int = 1) -> torch.Tensor:
    cfg = model.cfg
    return torch.randn(batch, cfg.window_len, cfg.input_channels)


def export_torchscript(model: VeloBinsNet, path: str | Path) -> Path:
    """Trace the eval-mode model to a TorchScript file (any batch size)."""
    path = Path(path)
    wrapper = ExportWrapper(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(wrapper, (_example(model, 2),), check_trace=False)
    traced.save(str(path))
    return path


def export_onnx(model: VeloBinsNet, path: str | Path, opset: int = 17) -> Path:
    """Export the eval-mode model to ONNX with a dynamic batch axis (TorchScript-based exporter)."""
    path = Path(path)
    wrapper = ExportWrapper(model)
    names = wrapper.output_names()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter needs no onnxscript
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
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
    return path
