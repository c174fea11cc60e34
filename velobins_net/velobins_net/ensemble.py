"""Ensembles of trained networks: one distribution over the bins from several members, and their disagreement.

One network's bins carry the uncertainty it learned from its labels (aleatoric), not how far another training
run would disagree with it on a flight unlike its training flights (epistemic). On small data the second is
what changes from flight to flight (docs/results/recipe_platforms/README.md, item 27): the label floor gives
every window nearly the same spread, while members trained with other seeds disagree about twice as much on
the flights where their errors are twice as large.

:class:`EnsembleNet` runs K members of the same configuration on a window and mixes them with equal weights.
For the bins that is the average of the members' distributions, still one distribution over the same bins,
decoded as every VeloBins distribution is: its mean is the members' mean v̄ = (1/K) Σ v_k and its variance the
members' mean variance plus the variance of their means (:func:`mixture_moments`),

    σ̄² = (1/K) Σ σ_k² + (1/K) Σ (v_k − v̄)²,

the second term the *disagreement* d, which :class:`~velobins_net.model.NetOutput` also carries on its own.
The predictor can weigh it apart (``predictor.disagreement_scale``, smoothed over ``disagreement_tau``), and
``velobins calibrate`` fits that weight on held-out flights. The same moments hold for regression members
(a mixture of Gaussians).

An ensemble checkpoint is an ordinary checkpoint (member 0's fields, so everything that reads a checkpoint's
recipe, data or normalisation still works) with ``members``: every member's ``model_state`` and where it came
from, and ``data`` the union of the members' flights, so the held-out check of ``calibrate`` refuses a flight
any member trained on (:func:`ensemble_checkpoint`; ``velobins ensemble`` writes one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint import MEMBERS_KEY, CheckpointError, checked_model_config, model_from_checkpoint
from .config import MAX_MEMBERS, ModelConfig
from .model import NetOutput, VeloBinsNet

SAME_FIELDS = ("window_s", "rate_hz", "num_rotors", "rotor_kind", "velocity_range", "num_bins", "head", "method")
"""Model-config fields every member must share: the same input window and, for the bins, the same grid."""


def mixture_moments(v: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, variance and disagreement of an equal-weight mixture of K members' estimates.

    Args:
        v: (K, B, 3) the members' means.
        var: (K, B, 3) their variances.

    Returns:
        (v̄, σ̄², d), each (B, 3): the mixture's mean, its variance (mean variance plus d) and d, the variance
        of the members' means (divided by K, the mixture's own moment, not an unbiased estimate).
    """
    mean = v.mean(dim=0)
    disagreement = ((v - mean) ** 2).mean(dim=0)
    return mean, var.mean(dim=0) + disagreement, disagreement


class EnsembleNet(nn.Module):
    """K members of one configuration, run on the same window and mixed with equal weights (module docstring).

    It has the interface the predictor, ``velobins evaluate`` and the node use (``cfg``, ``bins``, ``cov``,
    ``forward(x, uncertainty)`` → :class:`NetOutput`); ``NetOutput.disagreement`` is d.
    """

    def __init__(self, members: Sequence[VeloBinsNet]):
        super().__init__()
        if not members:
            raise ValueError("EnsembleNet: needs at least one member")
        check_compatible([m.cfg for m in members], [f"member {i}" for i in range(len(members))])
        self.members = nn.ModuleList(members)

    @property
    def cfg(self) -> ModelConfig:
        """Member 0's configuration (the members share what the window and the decode depend on)."""
        return self.members[0].cfg

    @property
    def bins(self):
        """Member 0's bin decoder, or None: whether the ensemble reports bin variances (they all do or none)."""
        return self.members[0].bins

    @property
    def cov(self):
        """Member 0's covariance decoder, or None."""
        return self.members[0].cov

    def forward(self, x: torch.Tensor, uncertainty: str | None = None) -> NetOutput:
        """x (B, T, 6+K) → the mixture's :class:`NetOutput`: v̄, σ̄², the average bin distribution (as logits:
        the log of the averaged probabilities, so a softmax gives it back), its bin variance, and d."""
        outs = [m(x, uncertainty=uncertainty) for m in self.members]
        if any(o.cov is not None for o in outs):
            raise ValueError("EnsembleNet: members with a full covariance (EqNIO) are not mixed")
        v, var, disagreement = mixture_moments(torch.stack([o.v for o in outs]), torch.stack([o.var for o in outs]))
        logits = bin_var = None
        if outs[0].logits is not None:  # log of the averaged probabilities, in log space: no underflow, few ops
            members_log_p = torch.log_softmax(torch.stack([o.logits for o in outs]), dim=-1)
            logits = torch.logsumexp(members_log_p, dim=0) - math.log(len(outs))
            bin_var = torch.stack([o.bin_var for o in outs]).mean(dim=0) + disagreement
        return NetOutput(v, var, logits, bin_var, None, disagreement=disagreement)

    def set_normalization(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Not for an ensemble: each member keeps the normalisation of its own training set."""
        raise TypeError("EnsembleNet: each member keeps its own input normalisation")

    def invalidate_cache(self) -> None:
        """Forget every member's derived-weight caches (:meth:`VeloBinsNet.invalidate_cache`)."""
        for member in self.members:
            member.invalidate_cache()


def check_compatible(configs: Sequence[ModelConfig], names: Sequence[str]) -> None:
    """Raise ValueError naming the member and field unless every config shares :data:`SAME_FIELDS` with the first."""
    for cfg, name in zip(configs[1:], names[1:], strict=True):
        for field in SAME_FIELDS:
            if getattr(cfg, field) != getattr(configs[0], field):
                raise ValueError(
                    f"{name}: model_config.{field} is {getattr(cfg, field)!r}, {names[0]}'s is "
                    f"{getattr(configs[0], field)!r} (members must share the window and the bins)"
                )
    if configs[0].method != "velobins":
        raise ValueError(f"{names[0]}: method {configs[0].method!r}: only VeloBins and regression members are mixed")


def ensemble_checkpoint(checkpoints: Sequence[dict[str, Any]], sources: Sequence[str | Path]) -> dict[str, Any]:
    """One ensemble checkpoint from member checkpoints (dicts as :func:`~velobins_net.checkpoint.read_checkpoint`
    gives them) read from ``sources``: member 0's fields, ``members`` (each one's model config, state and
    source), and ``data`` the union of the members' training and selection flights.

    Raises:
        ValueError: on fewer than 2 or more than :data:`MAX_MEMBERS` members, a member that is itself an
            ensemble, or members that do not share :data:`SAME_FIELDS` (the message names the member's file).
    """
    if not 2 <= len(checkpoints) <= MAX_MEMBERS:
        raise ValueError(f"an ensemble needs 2 to {MAX_MEMBERS} members, got {len(checkpoints)}")
    names = [str(s) for s in sources]
    for ckpt, name in zip(checkpoints, names, strict=True):
        if MEMBERS_KEY in ckpt:
            raise ValueError(f"{name}: is an ensemble already; give its members")
    configs = [checked_model_config(c, n) for c, n in zip(checkpoints, names, strict=True)]
    check_compatible(configs, names)
    first = checkpoints[0]
    merged = {k: v for k, v in first.items() if k not in ("optimizer_state", "rng")}  # no resuming
    merged[MEMBERS_KEY] = [
        {"model_config": c["model_config"], "model_state": c["model_state"], "source": n}
        for c, n in zip(checkpoints, names, strict=True)
    ]
    merged["data"] = {part: _union(checkpoints, part) for part in ("train", "val")}
    return merged


def ensemble_from_checkpoint(ckpt: dict[str, Any], path: str | Path = "<checkpoint>") -> EnsembleNet:
    """The :class:`EnsembleNet` (eval mode) of an ensemble checkpoint's ``members``, each member's config checked as
    a checkpoint's is, at most :data:`MAX_MEMBERS` of them; errors name the file and the member."""
    members = ckpt[MEMBERS_KEY]
    if not isinstance(members, list) or not 2 <= len(members) <= MAX_MEMBERS:
        count = len(members) if isinstance(members, list) else type(members).__name__
        raise CheckpointError(path, f"field 'members' must list 2 to {MAX_MEMBERS} members, got {count}")
    models = []
    for i, member in enumerate(members):
        if not isinstance(member, dict) or not {"model_config", "model_state"} <= member.keys():
            raise CheckpointError(path, f"field 'members[{i}]' needs 'model_config' and 'model_state'")
        models.append(model_from_checkpoint(member, f"{path} members[{i}]"))
    try:
        return EnsembleNet(models).eval()
    except ValueError as exc:
        raise CheckpointError(path, str(exc)) from None


def _union(checkpoints: Sequence[dict[str, Any]], part: str) -> list[dict[str, Any]]:
    """The members' ``data[part]`` flight records, each flight once (by name), in first-seen order."""
    seen, out = set(), []
    for ckpt in checkpoints:
        for record in (ckpt.get("data") or {}).get(part) or []:
            name = record.get("name") if isinstance(record, dict) else record
            if name not in seen:
                seen.add(name)
                out.append(record)
    return out
