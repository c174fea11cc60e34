"""``velobins export``: a checkpoint to TorchScript or ONNX, verified against the PyTorch model.

Usage::

    velobins export --checkpoint run/best.pt --format onnx --out model.onnx [--overwrite]

The export is written under a temporary name beside ``--out``, run on random windows
(:func:`velobins_net.export.check_parity`: TorchScript through ``torch.jit``, ONNX through
onnxruntime) and compared output by output with the PyTorch model; only an export that passes
is renamed onto ``--out``. Exit status: 0 written (the largest deviation is printed), 1 parity
failed (the deviation is printed and nothing is written), 2 a user error (one line naming the
file: a missing or foreign checkpoint, an existing ``--out`` without ``--overwrite``, an
unwritable folder).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from velobins_common.fields import add_config_options, config_values

if TYPE_CHECKING:
    from velobins_net.export import ParityResult

EXPORT_FIELDS = ("opset", "parity_batch", "parity_seed", "rtol", "atol")
"""The :class:`velobins_net.export.ExportConfig` fields exposed as options."""

EPILOG = """\
examples:
  velobins export --checkpoint run/best.pt --format torchscript --out velobins.pt
  velobins export --checkpoint run/best.pt --format onnx --out velobins.onnx --overwrite

Both take one input, window (B, T, 6+K): raw [acc (m/s^2), gyro (rad/s), rotor] at the model rate,
normalised inside; outputs velocity (B, 3) [m/s, body FLU], variance (B, 3) [m^2/s^2] and, for bin
models, probs (B, 3, N). Exit: 0 written (max deviation printed), 1 parity failed (nothing written),
2 user error."""


class ParityFailure(Exception):
    """The export differs from the PyTorch model beyond the tolerance (exit 1, nothing written)."""


def build_parser() -> argparse.ArgumentParser:
    """The ``velobins export`` options (tolerances and opset generated from ``ExportConfig``)."""
    from velobins_net.export import FORMATS, ExportConfig

    parser = argparse.ArgumentParser(
        prog="velobins export",
        description="Export a checkpoint to TorchScript or ONNX and check it against the PyTorch model "
        "on random windows (written only if every output agrees within the tolerance).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checkpoint", required=True, type=Path, help="checkpoint written by velobins train, or a shipped model name"
    )
    parser.add_argument("--format", required=True, choices=FORMATS, help="export format")
    parser.add_argument("--out", required=True, type=Path, help="output file (must not exist unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out (once the new one passes)")
    add_config_options(parser, ExportConfig, EXPORT_FIELDS)
    return parser


def check_out(out: Path, overwrite: bool) -> list[Path]:
    """Refuse an unusable ``--out`` before any work; return the parent folders still to create."""
    from velobins_common.outputs import OutputError, check_writable

    if out.is_dir():
        raise OutputError(out, "is a folder; --out takes the export's file name (e.g. velobins.onnx)")
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise OutputError(out, "exists; pass --overwrite to replace it")
    existing = next(p for p in (out.parent, *out.parent.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        raise OutputError(out, f"cannot create it: {existing} is a regular file, not a folder")
    check_writable(existing)
    return [p for p in (out.parent, *out.parent.parents) if not p.exists()]


RUNTIMES = {"onnx": ("onnx", "onnxruntime")}
"""Python packages a format needs beyond torch: the exporter's (onnx) and the parity check's (onnxruntime)."""


def _validate(args: argparse.Namespace) -> None:
    import importlib.util

    missing = [name for name in RUNTIMES.get(args.format, ()) if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(
            f"--format {args.format} needs the Python packages {missing} (export and parity check): "
            f"pip install {' '.join(missing)}"
        )
    if args.parity_batch < 1:
        raise ValueError(f"--parity-batch must be >= 1, got {args.parity_batch}")
    if args.rtol < 0 or args.atol < 0:
        raise ValueError(f"--rtol and --atol must be >= 0, got {args.rtol} and {args.atol}")


def _describe(parity: ParityResult) -> str:
    """``velocity 1.2e-07, variance ...``: the largest deviation of each output."""
    return ", ".join(f"{name} {value:.2e}" for name, value in parity.max_abs.items())


def export_checkpoint(args: argparse.Namespace) -> int:
    """Load, export under a temporary name, check parity, rename onto ``--out``; the exit status."""
    import torch

    from velobins_common.outputs import atomic_path
    from velobins_net.export import ExportConfig, check_parity, export_model
    from velobins_net.inference import load_checkpoint
    from velobins_net.pretrained import resolve_checkpoint

    _validate(args)
    out: Path = args.out
    created = check_out(out, args.overwrite)
    model = load_checkpoint(resolve_checkpoint(args.checkpoint))  # CheckpointError (exit 2) names the file
    cfg = ExportConfig(**config_values(args, EXPORT_FIELDS))
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    tolerance = f"atol {cfg.atol:g} + rtol {cfg.rtol:g}·|PyTorch|"
    try:
        for folder in reversed(created):
            folder.mkdir()
        with atomic_path(out) as tmp:
            export_model(model, tmp, args.format, cfg)
            parity = check_parity(model, tmp, args.format, cfg)
            if not parity.passed:
                raise ParityFailure(
                    f"velobins export: parity FAILED: max |{args.format} - PyTorch| = {parity.max_deviation:.3g} "
                    f"({_describe(parity)}) on {parity.batch} random windows exceeds {tolerance}; "
                    f"{out} not written"
                )
    except ParityFailure as exc:
        _remove_created(created)
        print(str(exc), file=sys.stderr)
        return 1
    except BaseException:
        _remove_created(created)
        raise
    size_kb = out.stat().st_size / 1024
    print(
        f"{out}: {args.format} export of {args.checkpoint} ({size_kb:.0f} KiB); parity with PyTorch on "
        f"{parity.batch} random windows: max deviation {parity.max_deviation:.3g} ({_describe(parity)}), "
        f"within {tolerance}"
    )
    return 0


def _remove_created(created: list[Path]) -> None:
    """Remove the parent folders this run made (a failed export leaves nothing behind)."""
    for folder in created:
        with contextlib.suppress(OSError):
            folder.rmdir()


def main_export(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins export``: 0 written, 1 parity failed, 2 usage error (printed by argparse)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return int(exc.code or 0)
    return export_checkpoint(args)
