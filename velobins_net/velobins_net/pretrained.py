"""Shipped pretrained models, resolvable by name (``--checkpoint crazyflie``, ``model:=crazyflie``).

The models live in this package's ``models/`` folder: ``<name>.pt`` (a checkpoint in the format
:func:`velobins_net.inference.load_checkpoint` reads, model weights only) beside ``<name>.yaml``,
the EKF parameter overlay the model was evaluated with, and ``MODEL_CARD.md`` (data, licence,
schedule, metrics, the command that re-measures them). A new model ships by adding its two files:
the shipped names are whatever ``models/*.pt`` holds, so this module needs no edit.

Every place that takes a checkpoint goes through :func:`resolve_model`, so a name and a path are
accepted alike: a path that exists is used as is (no overlay), a shipped name gives its files,
anything else is one error naming what was asked and listing the shipped names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple, TypeVar

# checkpoint.py imports torch: only the functions that read or write a checkpoint import it, so
# resolving a name stays cheap where torch is not otherwise needed (the launch files resolve model:=).

T = TypeVar("T")

MODELS_DIR = Path(__file__).resolve().parent / "models"
"""Folder of the shipped models (installed with the package as package data)."""


class ResolvedModel(NamedTuple):
    """A checkpoint and the EKF overlay that goes with it (None: a user's own checkpoint)."""

    checkpoint: Path
    overlay: Path | None


def shipped_models(models_dir: Path = MODELS_DIR) -> list[str]:
    """Names of the shipped models, sorted (``crazyflie``, ``crazyflie-reg``, ...)."""
    return sorted(p.stem for p in models_dir.glob("*.pt")) if models_dir.is_dir() else []


def resolve_model(name_or_path: str | Path, models_dir: Path = MODELS_DIR) -> ResolvedModel:
    """Checkpoint path and overlay path of a shipped model name, or an existing checkpoint path as is.

    A path that exists wins over a name (a file called ``crazyflie`` in the working directory is
    that file). Raises :class:`~velobins_net.checkpoint.CheckpointError` (a ``ValueError``, one
    line) for an empty value, or for one that is neither an existing path nor a shipped name.
    """
    text = str(name_or_path).strip()
    if text:
        path = Path(text).expanduser()
        if path.exists():
            return ResolvedModel(path, None)
        checkpoint = models_dir / f"{text}.pt"
        if "/" not in text and checkpoint.is_file():
            overlay = models_dir / f"{text}.yaml"
            return ResolvedModel(checkpoint, overlay if overlay.is_file() else None)
    from .checkpoint import CheckpointError  # here, not at the top: see the imports

    if not text:
        raise CheckpointError("<model>", f"no model given: a checkpoint path or a shipped name ({_names(models_dir)})")
    raise CheckpointError(
        text, f"no such checkpoint file, and no shipped model of that name (shipped: {_names(models_dir)})"
    )


def resolve_checkpoint(name_or_path: str | Path, models_dir: Path = MODELS_DIR) -> Path:
    """Just the checkpoint of :func:`resolve_model` (where the overlay is loaded separately or not at all)."""
    return resolve_model(name_or_path, models_dir).checkpoint


TRAINING_ONLY_KEYS = ("optimizer_state", "rng")
"""Checkpoint fields only a resumed training reads; a shipped model goes without them."""


ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:[^\s/,;()'\"]+/)*([^\s/,;()'\"]+)")
"""An absolute POSIX path inside a string; group 1 is its last component."""


def strip_machine_paths(value: T) -> T:
    """``value`` with every absolute path in its strings cut to its last component, in nested dicts, lists and
    tuples (other values, tensors included, are kept as they are).

    A training checkpoint names its flights by absolute path (``data.train[i].source``, the data description),
    which a local run needs (``velobins calibrate`` finds the validation flights by it). A shipped model needs
    only the names: the folders are the training machine's, and a user's copy should not carry them.
    """
    if isinstance(value, str):
        return ABSOLUTE_PATH.sub(lambda m: m.group(1), value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: strip_machine_paths(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, (list, tuple)):
        return type(value)(strip_machine_paths(v) for v in value)  # type: ignore[return-value]
    return value


def slim_checkpoint(source: str | Path, target: str | Path, **extra: object) -> Path:
    """Write ``source`` (a ``best.pt``) to ``target`` without :data:`TRAINING_ONLY_KEYS`, plus ``extra`` fields.

    What stays is what inference and an audit read: model config and weights, variant, bins,
    normalisation, training config, data, git commit, best epoch and history, with the training machine's
    folders cut from their paths (:func:`strip_machine_paths`: flights keep their file names). The result loads
    with :func:`velobins_net.inference.load_checkpoint` (``weights_only``) like the original; the
    weights are bit-identical. ``extra`` records how the model was made (e.g. ``shipped_as``).
    """
    from .checkpoint import read_checkpoint, save_checkpoint

    ckpt = read_checkpoint(source)
    kept = {k: v for k, v in ckpt.items() if k not in TRAINING_ONLY_KEYS and k != "format_version"}
    payload = {k: v if k == "model_state" else strip_machine_paths(v) for k, v in kept.items()}  # weights as they are
    return save_checkpoint(target, payload | extra)


def _names(models_dir: Path) -> str:
    return ", ".join(shipped_models(models_dir)) or "none installed"
