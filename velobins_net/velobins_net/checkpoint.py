"""Checkpoint files: layout, atomic save, validated load.

A checkpoint is a ``torch.save``d dict with a format version and everything needed to rebuild
and audit the model without the training code's arguments: the model config, the variant,
the bin grid and R, the input normalisation (also inside the state dict as buffers), the data
it was trained on, the git commit, the optimizer and RNG states (for resuming), and history.
"""

from __future__ import annotations

import pickle
import subprocess
from pathlib import Path
from typing import Any

import torch

from velobins_common.constants import canonical_rotor_kind
from velobins_common.outputs import atomic_path

from .config import CHECKPOINT_FORMAT_VERSION, ModelConfig
from .model import VeloBinsNet
from .networks import build_model

REQUIRED_KEYS = ("format_version", "model_config", "variant", "bins", "normalization", "model_state")
READ_VERSIONS = (1, CHECKPOINT_FORMAT_VERSION)
"""Format versions :func:`read_checkpoint` reads; older ones are brought to the current layout by :func:`upgrade`."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, malformed, of another format version, or does not match."""

    def __init__(self, path: str | Path, message: str):
        super().__init__(f"{path}: {message}")
        self.path = str(path)


def git_commit() -> str | None:
    """Commit hash of the source tree (best effort; None outside a git checkout)."""
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return res.stdout.strip() or None


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically with the current format version.

    The temporary file is unique to the process (two writers never share it) and is removed if
    the save fails or is interrupted, so the previous checkpoint at ``path`` stays loadable.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format_version": CHECKPOINT_FORMAT_VERSION} | payload
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def _numpy_globals() -> list[Any]:
    """What a checkpoint written with numpy arrays inside needs beyond torch's safe types.

    Only array reconstruction is allowed (no functions, no arbitrary classes); everything the
    arrays hold still goes through torch's restricted unpickler.
    """
    import numpy as np

    multiarray = getattr(np, "_core", None) or np.core
    return [multiarray.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.float64))]


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and validate a checkpoint dict (format version, required keys)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "no such checkpoint file")
    try:
        # weights_only: a checkpoint is data; loading one must never run code from the file.
        with torch.serialization.safe_globals(_numpy_globals()):
            ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()
        detail = next((ln for ln in first if "Unsupported global" in ln or "GLOBAL" in ln), first[0] if first else "")
        message = f"refused: the file holds objects a checkpoint never contains ({detail.strip()})"
        raise CheckpointError(path, message) from None
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(path, f"not a readable checkpoint ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(ckpt, dict):
        raise CheckpointError(path, f"expected a dict, got {type(ckpt).__name__}")
    version = ckpt.get("format_version")
    if version not in READ_VERSIONS:
        raise CheckpointError(path, f"field 'format_version' is {version!r}, this code reads versions {READ_VERSIONS}")
    missing = [k for k in REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(path, f"missing fields {missing}")
    return upgrade(ckpt, path)


def upgrade(ckpt: dict[str, Any], path: str | Path = "<checkpoint>") -> dict[str, Any]:
    """A checkpoint dict of an older format version in the current layout (the file is not touched).

    1 → 2: the rotor kinds ``"rpm"``/``"pwm"`` are ``"speed"``/``"command"`` (same data, same units) in
    ``model_config``, ``normalization`` and ``train_config.model``.
    """
    if ckpt.get("format_version") == CHECKPOINT_FORMAT_VERSION:
        return ckpt

    def renamed(section: Any, where: str) -> Any:
        if not isinstance(section, dict) or "rotor_kind" not in section:
            return section
        try:
            return dict(section) | {"rotor_kind": canonical_rotor_kind(str(section["rotor_kind"]))}
        except ValueError as exc:
            raise CheckpointError(path, f"field '{where}.rotor_kind' {exc}") from None

    ckpt = dict(ckpt) | {"format_version": CHECKPOINT_FORMAT_VERSION}
    for section in ("model_config", "normalization"):
        ckpt[section] = renamed(ckpt[section], section)
    train = ckpt.get("train_config")
    if isinstance(train, dict) and "model" in train:
        ckpt["train_config"] = dict(train) | {"model": renamed(train["model"], "train_config.model")}
    return ckpt


def model_from_checkpoint(ckpt: dict[str, Any], path: str | Path = "<checkpoint>") -> VeloBinsNet:  # or a baseline
    """Rebuild the model (eval mode) from a checkpoint dict; errors name ``path`` and the field."""
    try:
        cfg = ModelConfig.from_dict(dict(ckpt["model_config"]), source=str(path))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(path, f"field 'model_config' is invalid: {exc}") from exc
    model = build_model(cfg)
    try:
        model.load_state_dict(ckpt["model_state"])
    except RuntimeError as exc:
        raise CheckpointError(path, f"field 'model_state' does not match 'model_config': {exc}") from exc
    return model.eval()
