"""The accelerator layer: what makes the network's forward and training step fast, behind one switch.

The model (:mod:`velobins_net.encoder`, :mod:`velobins_net.transformer`, :mod:`velobins_net.decoders`,
:mod:`velobins_net.bins`) is written once, in PyTorch, as modules whose forward reads as the
architecture. Where a step has a faster implementation, the forward carries it as a commented
branch beside the plain computation (as nanoGPT keeps its flash attention), calling into this
package; each function here declines, and the plain computation runs, whenever its fast path
does not apply:

* :func:`native_attention`: the all-token self-attention for small heads on the CPU, a native C++
  kernel (:mod:`.native`; :func:`native_applies` says when);
* :class:`Linear`: ``nn.Linear`` on oneDNN's matmul for training-size inputs (:mod:`.onednn_linear`);
* :func:`gelu`: the exact GELU, a native kernel for the small activations of one window
  (oneDNN's eltwise primitive, PyTorch's choice, has a large fixed cost there);
* :func:`bin_decode`: the bin decoder of a few windows in one native call, the backend of
  :func:`velobins_net.bins.decode_queries`;
* :class:`DerivedCache`: weights derived from parameters (block-diagonal convolutions, the folded
  last-layer attention, bin features), cached for gradient-free calls and rebuilt when a parameter
  changes (:mod:`.cache`);
* :class:`TracedForward`: a gradient-free call of a few windows through the model's own forward,
  traced and frozen (TorchScript), so no Python runs per layer (:mod:`.traced`);
* :func:`reuse_freed_memory`: allocator tuning for a training process (:mod:`.cpu_memory`).

The one switch, :func:`enabled`: ``VELOBINS_NATIVE_KERNELS=0`` in the environment (or
:func:`set_enabled` in the process) turns off the native kernels, the oneDNN linears and the
model's fast paths; the model then runs its plain layer-by-layer forward, with the same results
to float rounding. ``python -m velobins_net.accel.native`` builds the kernels ahead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import native
from .cache import DerivedCache
from .cpu_memory import reuse_freed_memory
from .native import bin_decode, kernel_status, native_applies, native_attention, set_enabled
from .native import kernels_enabled as enabled
from .onednn_linear import Linear, linear
from .traced import TracedForward, eager

__all__ = [
    "DerivedCache",
    "Linear",
    "TracedForward",
    "bin_decode",
    "eager",
    "enabled",
    "gelu",
    "kernel_status",
    "linear",
    "native_applies",
    "native_attention",
    "reuse_freed_memory",
    "set_enabled",
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
