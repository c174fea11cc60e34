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
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from velobins_common.errors import OptionError
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


def check_out(out: Path, overwrite: bool):
    """The checked ``--out`` before any work (:func:`velobins_common.output_files.check_output_file`):
    an existing file only with ``--overwrite``, never a folder or a link to a file; special files
    (``-``, a pipe) receive the export directly."""
    from velobins_common.output_files import check_output_file

    return check_output_file(out, overwrite, "--out")


RUNTIMES = {"onnx": ("onnx", "onnxruntime")}
"""Python packages a format needs beyond torch: the exporter's (onnx) and the parity check's (onnxruntime)."""


def _validate(args: argparse.Namespace) -> None:
    import importlib.util

    missing = [name for name in RUNTIMES.get(args.format, ()) if importlib.util.find_spec(name) is None]
    if missing:
        raise OptionError(
            "--format",
            f"{args.format} needs the Python packages {missing} (export and parity check): "
            f"pip install {' '.join(missing)}",
        )
    if args.parity_batch < 1:
        raise OptionError("--parity-batch", f"must be >= 1, got {args.parity_batch}")
    if args.rtol < 0 or args.atol < 0:
        raise OptionError("--rtol/--atol", f"must be >= 0, got {args.rtol} and {args.atol}")


def _describe(parity: ParityResult) -> str:
    """``velocity 1.2e-07, variance ...``: the largest deviation of each output."""
    return ", ".join(f"{name} {value:.2e}" for name, value in parity.max_abs.items())


def export_checkpoint(args: argparse.Namespace) -> int:
    """Load, export under a temporary name, check parity, rename onto ``--out``; the exit status."""
    import torch

    from velobins_common.output_files import staged_output
    from velobins_net.export import ExportConfig, check_parity, export_model
    from velobins_net.inference import load_checkpoint
    from velobins_net.pretrained import resolve_checkpoint

    _validate(args)
    out: Path = args.out
    target = check_out(out, args.overwrite)
    model = load_checkpoint(resolve_checkpoint(args.checkpoint))  # CheckpointError (exit 2) names the file
    cfg = ExportConfig(**config_values(args, EXPORT_FIELDS))
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    tolerance = f"atol {cfg.atol:g} + rtol {cfg.rtol:g}·|PyTorch|"
    try:
        with staged_output(target) as tmp:  # renamed onto --out (or copied into a pipe) only if parity passes
            export_model(model, tmp, args.format, cfg)
            parity = check_parity(model, tmp, args.format, cfg)
            if not parity.passed:
                raise ParityFailure(
                    f"velobins export: parity FAILED: max |{args.format} - PyTorch| = {parity.max_deviation:.3g} "
                    f"({_describe(parity)}) on {parity.batch} random windows exceeds {tolerance}; "
                    f"{out} not written"
                )
    except ParityFailure as exc:
        print(str(exc), file=sys.stderr)
        return 1
    size = f" ({out.stat().st_size / 1024:.0f} KiB)" if target.kind == "file" else ""
    print(
        f"{out}: {args.format} export of {args.checkpoint}{size}; parity with PyTorch on "
        f"{parity.batch} random windows: max deviation {parity.max_deviation:.3g} ({_describe(parity)}), "
        f"within {tolerance}",
        file=sys.stderr if target.descriptor == 1 else sys.stdout,  # stdout carries the export itself
    )
    return 0


def main_export(argv: list[str] | None = None) -> int:
    """Entry point of ``velobins export``: 0 written, 1 parity failed, 2 usage error (printed by argparse)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return int(exc.code or 0)
    return export_checkpoint(args)
