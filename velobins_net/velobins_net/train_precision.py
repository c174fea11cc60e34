"""Mixed-precision training (``velobins train --precision 32|bf16|16``) and the deterministic mode.

``bf16`` and ``16`` run the network's forward pass under :func:`torch.autocast` (matrix products and
convolutions in the low precision, reductions and the softmax in float32, as autocast decides); the
loss is computed on the outputs cast back to float32, because the labels' Gaussian CDF differences
and the KL term lose their small bin masses in 8 mantissa bits. ``16`` (float16) also scales the
loss with a :class:`torch.amp.GradScaler`, so small gradients do not flush to zero (bfloat16 has
float32's exponent range and needs none). The weights, the optimiser state, validation and the
checkpoints stay float32: validation sees the model as inference will.

Whether the device supports a precision is probed once with a tiny forward and backward pass under
autocast, so an unsupported combination (a torch build or CPU without float16 kernels, a GPU without
bfloat16) is one clear error before the run starts instead of a failure in its first step.

The deterministic mode (:func:`deterministic_algorithms`) makes torch refuse every kernel without a
deterministic implementation and fixes cuBLAS's workspace, so two runs with the same seed, data,
thread count and device give bit-identical weights.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from velobins_common.errors import UserError

PRECISIONS = ("32", "bf16", "16")
"""``--precision`` values: float32 (the paper), bfloat16 autocast, float16 autocast with loss scaling."""

_DTYPES = {"32": None, "bf16": torch.bfloat16, "16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """How one run computes its forward pass.

    Attributes:
        name: one of :data:`PRECISIONS`.
        device_type: ``"cpu"`` or ``"cuda"`` (autocast's device type).
        dtype: the autocast dtype, None for float32 (autocast off).
    """

    name: str
    device_type: str
    dtype: torch.dtype | None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward pass's context: autocast to :attr:`dtype`, or nothing for float32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A loss scaler for float16 (None otherwise: float32 and bfloat16 gradients do not underflow)."""
        return torch.amp.GradScaler(self.device_type) if self.dtype == torch.float16 else None


def to_float32(out: Any) -> Any:
    """A network output (a NamedTuple of tensors and None) with every floating tensor in float32."""

    def cast(t: Any) -> Any:
        return t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    return type(out)(*(cast(t) for t in out)) if isinstance(out, tuple) else cast(out)


def resolve_precision(name: str, device: torch.device) -> Precision:
    """The :class:`Precision` of ``--precision name`` on ``device``, probed; ValueError when unsupported.

    The probe runs a tiny linear layer forward and backward under autocast (with the scaler for
    float16), so a combination this torch build or this device cannot run is refused in one line.
    """
    if name not in PRECISIONS:
        raise UserError(f"--precision: must be one of {', '.join(PRECISIONS)}, got {name!r}")
    precision = Precision(name, device.type, _DTYPES[name])
    if precision.dtype is None:
        return precision
    try:
        probe = nn.Linear(4, 4).to(device)
        with precision.autocast():
            out = probe(torch.ones(2, 4, device=device))
        if out.dtype != precision.dtype:
            raise RuntimeError(f"autocast produced {out.dtype}")
        loss = out.float().sum()
        scaler = precision.grad_scaler()
        (scaler.scale(loss) if scaler is not None else loss).backward()
    except (RuntimeError, TypeError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise UserError(
            f"--precision {name}: not supported on {device.type} by this torch {torch.__version__} ({detail}); "
            "use --precision 32" + (" or bf16" if name == "16" else "")
        ) from None
    return precision


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """Within the block, torch uses deterministic kernels only (an op without one raises), cuDNN does not
    benchmark, and cuBLAS gets the fixed workspace it needs; the previous settings come back afterwards.

    ``CUBLAS_WORKSPACE_CONFIG`` is read when cuBLAS starts: it is set here (unless the user set it),
    which is in time for a process whose first CUDA matrix product comes later, as in ``velobins train``.
    """
    if not enabled:
        yield
        return
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.benchmark = before[1]
