"""Every network family behind one door: the model of a config and its training loss.

:class:`velobins_net.model.VeloBinsNet` (VeloBins and the AI-IO regression baseline) and the
Table I baselines of :mod:`velobins_net.baselines` all map a raw window to a
:class:`~velobins_net.model.NetOutput`; :func:`build_model` picks the family from
``ModelConfig.method`` and :func:`training_loss` the loss from the variant. Kept apart from
:mod:`.model` and :mod:`.losses` because the baselines build on both (no import cycle).
"""

from __future__ import annotations

import torch
from torch import nn

from .baselines import build
from .baselines.losses import baseline_loss
from .bins import BinGrid
from .config import ModelConfig
from .labels import error_conditioned_labels
from .losses import LabelFn, variant_loss
from .model import NetOutput, VeloBinsNet
from .variants import Variant


def build_model(cfg: ModelConfig) -> nn.Module:
    """The network of ``cfg.method``: :class:`VeloBinsNet`, or a Table I baseline (:func:`.baselines.build`)."""
    return VeloBinsNet(cfg) if cfg.method == "velobins" else build(cfg)


def training_loss(
    variant: Variant,
    out: NetOutput,
    y: torch.Tensor,
    grid: BinGrid,
    centres: torch.Tensor,
    use_nll: bool = False,
    label_fn: LabelFn = error_conditioned_labels,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(total loss, named terms) of a training batch: the baseline's own loss
    (:func:`velobins_net.baselines.losses.baseline_loss`, ``use_nll`` its second phase) or
    :func:`velobins_net.losses.variant_loss`."""
    if variant.is_baseline:
        total = baseline_loss(variant.method, out, y, use_nll)
        return total, {variant.method: float(total.detach())}
    return variant_loss(variant, out, y, grid, centres, use_nll=use_nll, label_fn=label_fn)
