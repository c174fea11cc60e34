"""Fine-tuning: a training run that starts from another model's weights (``velobins train --init-from``).

The source is a shipped model name (``crazyflie``, resolved by :mod:`.pretrained` as everywhere
else) or a checkpoint path. What may differ between that model and the new run, and why:

* **rotor count** — the rotor branch's input layer has one input channel per rotor; when the count
  differs its parameters keep the fresh initialisation (the rest of the encoder is per-modality and
  carries over), and they are trained even inside a frozen module;
* **rotor kind** (``command`` ↔ ``speed``) — every input channel is normalised by statistics fitted on the
  training flights, so the rotor branch sees zero-mean, unit-variance inputs either way;
* **normalisation statistics** — always refitted on the new training flights, as for a fresh run;
* **velocity range R** — refitted on the new flights like a fresh run (or ``--velocity-range``): the
  bin decoder encodes each bin by its position relative to R, so its weights carry over and the
  bins span the new vehicle's speeds (a 2 m/s Crazyflie model fine-tuned on a 14 m/s vehicle);
* **uncertainty source** reported by default (an inference-time choice).

Everything else of :class:`~velobins_net.config.ModelConfig` is architecture (method, head,
covariance decoder, bins, bin encoding, widths, layers, window and rate) and must match: a difference
is one :class:`~velobins_net.checkpoint.CheckpointError` line naming the source and every field.

``--freeze NAME`` stops the training of a submodule (``encoder``, ``bins``, ``cov``, or a dotted path
such as ``encoder.layers.0``): its parameters keep the loaded values and the optimiser never sees them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from velobins_common.errors import UserError

from .checkpoint import MEMBERS_KEY, CheckpointError, read_checkpoint
from .config import ModelConfig, config_differences
from .networks import build_model
from .pretrained import resolve_checkpoint

INIT_FREE_FIELDS = ("num_rotors", "rotor_kind", "velocity_range", "uncertainty", "update_rate_hz")
"""ModelConfig fields a fine-tuned model may change; every other field is architecture and must match."""


def read_init_source(name_or_path: str) -> tuple[Path, dict[str, Any]]:
    """The checkpoint file and dict of ``--init-from`` (a shipped name or a path); CheckpointError if neither, or
    if it is an ensemble's (``velobins ensemble``: fine-tune from one of its members)."""
    path = resolve_checkpoint(name_or_path)
    ckpt = read_checkpoint(path)
    if MEMBERS_KEY in ckpt:
        sources = ", ".join(str(m.get("source")) for m in ckpt[MEMBERS_KEY] if isinstance(m, dict))
        raise CheckpointError(path, f"is an ensemble's checkpoint: fine-tune from one of its members ({sources})")
    return path, ckpt


def check_init_compatible(source: dict[str, Any], target: ModelConfig, path: str | Path) -> None:
    """Refuse a source whose architecture differs from ``target`` (fields outside :data:`INIT_FREE_FIELDS`)."""
    try:
        src = ModelConfig.from_dict(dict(source["model_config"]), source=str(path)).to_dict()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(path, f"field 'model_config' is invalid: {exc}") from None
    mine = target.to_dict()
    for name in INIT_FREE_FIELDS:
        src.pop(name, None)
        mine.pop(name, None)
    diffs = config_differences(src, mine)
    if diffs:
        raise CheckpointError(
            path,
            "cannot fine-tune from it, the architecture differs (source != this run): "
            + "; ".join(diffs)
            + f"; only {', '.join(INIT_FREE_FIELDS)} may differ",
        )


def load_init_weights(model: nn.Module, source: dict[str, Any], path: str | Path) -> list[str]:
    """Copy the source's learned weights into ``model`` (built for the new run); return the names kept fresh.

    Parameters are copied where the shapes agree (a shape that differs can only be the rotor input
    layer once :func:`check_init_compatible` has passed). A buffer is copied only when it was
    learned, i.e. differs in the source from what the source's own config builds (batch-norm
    statistics); buffers derived from the config (bin centres, encodings, spans) stay the new run's.
    The normalisation buffers are replaced by the caller with statistics of the new flights.
    """
    state = source["model_state"]
    fresh_source = build_model(ModelConfig.from_dict(dict(source["model_config"]), source=str(path))).state_dict()
    params = dict(model.named_parameters())
    merged = model.state_dict()
    kept_fresh = []
    for key, value in merged.items():
        if key not in state:
            raise CheckpointError(path, f"cannot fine-tune from it: its weights lack {key!r}")
        loaded = state[key]
        if key in params:
            if loaded.shape == value.shape:
                merged[key] = loaded
            else:
                kept_fresh.append(key)
        elif (
            loaded.shape == value.shape
            and key in fresh_source
            and not torch.equal(fresh_source[key].to(loaded.dtype), loaded)
        ):
            merged[key] = loaded  # a learned buffer
    model.load_state_dict(merged)
    return kept_fresh


def freeze_modules(model: nn.Module, names: Iterable[str], keep_trainable: Iterable[str] = ()) -> list[str]:
    """Stop training the submodules ``names``; return the frozen parameter names.

    ``keep_trainable`` (freshly initialised parameters) stay trainable inside a frozen module.
    ValueError naming the choices for a name that is not a submodule.
    """
    modules = dict(model.named_modules())
    keep = set(keep_trainable)
    frozen = []
    for name in names:
        if not name or name not in modules:
            choices = ", ".join(n for n, _ in model.named_children())
            raise UserError(f"--freeze: {name!r} is not a part of this model (choose from {choices} or a dotted path)")
        prefix = f"{name}."
        for pname, param in model.named_parameters():
            if pname.startswith(prefix) and pname not in keep:
                param.requires_grad_(False)
                frozen.append(pname)
    return sorted(set(frozen))


def initialise(
    core: nn.Module,
    mcfg: ModelConfig,
    init_from: str | None,
    freeze: Iterable[str],
    resume: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Start a run's ``core``: ``init_from``'s weights (not when resuming: ``resume`` has them), ``freeze`` applied.

    Returns the checkpoint's ``init`` record (source, its variant and config, the parameters kept
    fresh and those frozen), or None for a run from scratch that freezes nothing. A resumed run
    freezes what the interrupted one froze, from the record it saved.
    """
    if resume is not None:
        init = resume.get("init")
        freeze_modules(core, freeze, init["kept_fresh"] if init else [])
        return init
    source: dict[str, Any] = {}
    fresh: list[str] = []
    if init_from:
        path, ckpt = read_init_source(init_from)
        check_init_compatible(ckpt, mcfg, path)
        fresh = load_init_weights(core, ckpt, path)
        source = {
            "source": init_from,
            "path": str(path),
            "variant": ckpt["variant"],
            "model_config": dict(ckpt["model_config"]),
            "git_commit": ckpt.get("git_commit"),
        }
    frozen = freeze_modules(core, freeze, fresh)
    if not init_from and not frozen:
        return None
    return source | {"kept_fresh": fresh, "frozen": frozen}
