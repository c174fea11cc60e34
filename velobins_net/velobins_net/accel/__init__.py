"""The accelerator layer: how the network's forward and training step are made fast, behind one switch.

The model (:mod:`velobins_net.encoder`, :mod:`velobins_net.transformer`,
:mod:`velobins_net.model`, :mod:`velobins_net.bins`) is written once, in PyTorch; where an
operation has a faster implementation it calls the function of this package instead of the
PyTorch op, and each function here falls back to that PyTorch op whenever its fast path does not
apply. Nothing outside this package knows how the speed is obtained:

* :func:`attention`: the all-token self-attention on the packed projection, a native C++ kernel
  for small heads on the CPU (:mod:`.native`);
* :func:`linear`: ``F.linear`` on oneDNN's matmul for training-size inputs (:mod:`.onednn_linear`);
* :func:`gelu`: the exact GELU, a native kernel for the small activations of one window
  (oneDNN's eltwise primitive, PyTorch's choice, has a large fixed cost there);
* :func:`bin_decode`: the bin decoder of a few windows in one native call, the backend of
  :func:`velobins_net.bins.decode_queries`;
* :class:`DerivedCache`: weights derived from parameters (fused, folded), cached for
  gradient-free calls and rebuilt when a parameter changes (:mod:`.cache`);
* :func:`reuse_freed_memory`: allocator tuning for a training process (:mod:`.cpu_memory`).

The one switch: ``VELOBINS_NATIVE_KERNELS=0`` in the environment (read by :func:`enabled`) turns
the native kernels and the oneDNN linears off; the model then runs PyTorch's ops only, with the
same results to float rounding. ``python -m velobins_net.accel.native`` builds the kernels ahead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import native
from .cache import DerivedCache, map_tensors, tensor_items
from .cpu_memory import reuse_freed_memory
from .native import attention, bin_decode, kernel_status
from .native import kernels_enabled as enabled
from .onednn_linear import linear

__all__ = [
    "DerivedCache",
    "attention",
    "bin_decode",
    "enabled",
    "gelu",
    "kernel_status",
    "linear",
    "map_tensors",
    "reuse_freed_memory",
    "tensor_items",
]

NATIVE_GELU_MAX_NUMEL = 65536
"""GELU inputs up to this many values take PyTorch's native kernel (see :func:`gelu`); larger ones oneDNN."""


def gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU, ``F.gelu(x)``; small float32 CPU tensors without autograd in one native call.

    For contiguous float32 CPU tensors ``F.gelu`` takes oneDNN's eltwise primitive, whose fixed
    cost dominates at one window, while for training-size activations it is the faster one. So
    up to :data:`NATIVE_GELU_MAX_NUMEL` values :func:`velobins_net.accel.native.gelu` runs (same
    values to float rounding); it declines what it cannot do (a gradient, tracing, another dtype),
    and ``F.gelu`` runs. No global flag is touched.
    """
    if x.numel() <= NATIVE_GELU_MAX_NUMEL:
        y = native.gelu(x)
        if y is not None:
            return y
    return F.gelu(x)
