"""Checkpoint files: layout, atomic save, validated load.

A checkpoint is a ``torch.save``d dict with a format version and everything needed to rebuild
and audit the model without the training code's arguments: the model config, the variant,
the bin grid and R, the input normalisation (also inside the state dict as buffers), the data
it was trained on, the git commit, the optimizer and RNG states (for resuming), and history.
"""

from __future__ import annotations

import dataclasses
import io
import math
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from velobins_common.constants import canonical_rotor_kind
from velobins_common.errors import UserError
from velobins_common.fields import coerce_value
from velobins_common.outputs import atomic_write_bytes

from .config import CHECKPOINT_FORMAT_VERSION, ModelConfig
from .model import VeloBinsNet
from .networks import build_model

REQUIRED_KEYS = ("format_version", "model_config", "variant", "bins", "normalization", "model_state")
READ_VERSIONS = (1, CHECKPOINT_FORMAT_VERSION)
"""Format versions :func:`read_checkpoint` reads; older ones are brought to the current layout by :func:`upgrade`."""

MEMBERS_KEY = "members"
"""The field that makes a checkpoint an ensemble's (:mod:`velobins_net.ensemble`): every member's config and state."""

MAX_CHECKPOINT_BYTES = 512 << 20
"""Largest checkpoint file read (the paper's model is < 2 MB; the largest allowed model well under this)."""


class CheckpointError(UserError):
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
    the save fails or is interrupted, so the previous checkpoint at ``path`` stays loadable; a full
    disk is an ``OutputError`` naming ``path``. The payload is serialised in memory first, so every
    failure to write is an ``OSError`` of the file, never one inside torch's writer.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format_version": CHECKPOINT_FORMAT_VERSION} | payload
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write_bytes(path, buffer.getvalue())
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
    size = path.stat().st_size
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(
            path,
            f"file is {size / 2**20:.0f} MiB, more than a checkpoint holds (limit {MAX_CHECKPOINT_BYTES >> 20} MiB)",
        )
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


def checked_model_config(ckpt: dict[str, Any], path: str | Path = "<checkpoint>") -> ModelConfig:
    """The checkpoint's :class:`ModelConfig`, every field's type and range checked before anything is built.

    The ranges are the fields' own (``ModelConfig``'s ``param(..., min=, max=)``), so a crafted
    ``num_bins = 2**31`` or ``d_model = 48.0`` is refused here, naming the file and the field,
    instead of allocating gigabytes or failing deep inside torch.
    """
    raw = ckpt["model_config"]
    if not isinstance(raw, dict):
        raise CheckpointError(path, f"field 'model_config' is a {type(raw).__name__}, not a mapping")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    values = {}
    for name, value in raw.items():
        if name not in known:
            raise CheckpointError(path, f"unknown field 'model_config.{name}'")
        try:
            values[name] = coerce_value(ModelConfig, str(name), value)
        except ValueError as exc:
            raise CheckpointError(path, f"field 'model_config.{name}' {str(exc).split(': ', 1)[-1]}") from None
    try:
        return ModelConfig.from_dict(values, source=str(path))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(path, f"field 'model_config' is invalid: {exc}") from None


def model_from_checkpoint(ckpt: dict[str, Any], path: str | Path = "<checkpoint>") -> VeloBinsNet:  # or a baseline
    """Rebuild the model (eval mode) from a checkpoint dict; errors name ``path`` and the field. An ensemble's
    checkpoint (``members``) is refused here: :func:`velobins_net.inference.load_checkpoint` loads either kind."""
    if MEMBERS_KEY in ckpt:
        raise CheckpointError(
            path, f"is an ensemble's checkpoint (field '{MEMBERS_KEY}'): load it with load_checkpoint"
        )
    cfg = checked_model_config(ckpt, path)
    model = build_model(cfg)
    try:
        model.load_state_dict(ckpt["model_state"])
    except RuntimeError as exc:
        raise CheckpointError(path, f"field 'model_state' does not match 'model_config': {exc}") from exc
    return model.eval()


def _best_record(path: Path) -> tuple[float, int] | None:
    """(validation value, epoch) of the checkpoint at ``path``; None when it is missing or unreadable."""
    if not path.is_file():
        return None
    try:
        ckpt = read_checkpoint(path)
        return float(ckpt["best"]["value"]), int(ckpt["epoch"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None


def resumed_best(resume: str | Path, ckpt: dict[str, Any], best_path: Path, write: bool = True) -> tuple[float, int]:
    """The best (value, epoch) a run resumed from ``ckpt`` continues with; ``best_path`` repaired to match.

    An interrupted save can leave ``best.pt`` and the checkpoint resumed from out of step: a run
    that saved ``last.pt`` before ``best.pt`` (earlier versions) records a best epoch whose
    ``best.pt`` was never written; one that saves ``best.pt`` first can leave a ``best.pt`` one
    epoch ahead. The rules, in order: a ``best.pt`` of the recorded epoch is kept; a ``best.pt``
    from after the resumed epoch is adopted (it is a complete model the run will re-train past);
    when the resumed checkpoint is itself the recorded best, it is copied to ``best_path`` (with
    ``write``); a readable ``best.pt`` of another epoch is adopted; otherwise the best restarts.
    Repairs are reported on stderr.
    """
    recorded = ckpt.get("best") or {}
    value, epoch = float(recorded.get("value", math.inf)), int(recorded.get("epoch", -1))
    current = int(ckpt["epoch"])
    found = _best_record(best_path)
    if found is not None and found[1] == epoch:
        return value, epoch
    note = None
    if found is not None and found[1] > current:
        (value, epoch), note = found, f"kept {best_path} of epoch {found[1]} (saved before the interruption)"
    elif epoch == current and epoch >= 0 and math.isfinite(value):
        if write:
            atomic_write_bytes(best_path, Path(resume).read_bytes())
        note = f"wrote {best_path} from {resume}: epoch {epoch} was the best and its save was interrupted"
    elif found is not None and math.isfinite(found[0]):
        (value, epoch), note = found, f"best is {best_path} (epoch {found[1]}), not epoch {epoch} as recorded"
    elif epoch >= 0:
        value, epoch = math.inf, -1
        note = f"{best_path} of the recorded best epoch is missing; the best restarts from the resumed epochs"
    if note is not None and write:
        print(f"resume: {note}", file=sys.stderr)
    return value, epoch
