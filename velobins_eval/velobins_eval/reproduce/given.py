"""Checkpoints given to ``velobins reproduce --checkpoint``: scored on each split beside the trained rows.

A shipped model name (``crazyflie``) or a checkpoint path, resolved as everywhere else
(:func:`velobins_net.pretrained.resolve_model`). Each goes through the code path of ``velobins
evaluate`` (:func:`velobins_eval.evaluate.evaluate_checkpoint`) with the filter parameters
``evaluate`` would give it (:func:`velobins_eval.evaluate.model_params`): ``--params`` when given,
else a shipped model's own overlay, else the defaults. The trained rows use ``--params`` (or the
defaults). :func:`filters_section` is the report's table of which parameters each row used.

Given checkpoints are not units of the plan (:mod:`.plan`): they are scored again on every run,
never trained, and do not enter the manifest, so adding or dropping one never refuses an ``--out``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from velobins_common.errors import OptionError, printable

from ..evaluate import evaluate_checkpoint, filter_summary, load_ekf_config, model_params
from ..scoring import GroundTruth, score
from .summary import RowSummary


@dataclass(frozen=True)
class GivenCheckpoint:
    """One ``--checkpoint``: the report row's label, the checkpoint file, its overlay (None: a user's file)."""

    label: str
    checkpoint: Path
    overlay: Path | None


def resolve_given(names: list[str], reserved: tuple[str, ...] = ()) -> tuple[GivenCheckpoint, ...]:
    """The ``--checkpoint`` values resolved and read (a missing or foreign checkpoint fails now, one line).

    The row label is the value as given (``crazyflie``); one that repeats or names a trained row
    (``reserved``) is refused.
    """
    from velobins_net.checkpoint import read_checkpoint
    from velobins_net.pretrained import resolve_model

    given = []
    for name in names:
        model = resolve_model(name)
        read_checkpoint(model.checkpoint)
        label = printable(str(name))
        if label in reserved or any(g.label == label for g in given):
            raise OptionError("--checkpoint", f"{label} is given twice or names a trained row ({', '.join(reserved)})")
        given.append(GivenCheckpoint(label, Path(model.checkpoint).resolve(), model.overlay))
    return tuple(given)


def score_given(
    given: tuple[GivenCheckpoint, ...], seqs: list, params: tuple[Path, ...]
) -> tuple[dict[str, RowSummary], dict[str, dict[str, Any]]]:
    """Rows (one seed each) of the given checkpoints on ``seqs``, and the filter summary of each row."""
    from velobins_net.inference import load_predictor_config

    rows: dict[str, RowSummary] = {}
    filters: dict[str, dict[str, Any]] = {}
    for g in given:
        files, why = model_params(g.overlay, list(params))
        ekf, predictor = load_ekf_config(files), load_predictor_config(files)
        _, records = evaluate_checkpoint(
            g.checkpoint, seqs, ekf, progress=False, predictor_config=predictor, label=g.label
        )
        rows[g.label] = RowSummary({0: {s.name: score(records[s.name], GroundTruth.of(s)) for s in seqs}})
        filters[g.label] = filter_summary(files, why, ekf, predictor) | {"checkpoint": str(g.checkpoint)}
    return rows, filters


def trained_filter(params: tuple[Path, ...], ekf: Any) -> dict[str, Any]:
    """The filter summary of the trained rows: ``--params`` or the defaults."""
    files = list(params)
    return filter_summary(files, "--params" if files else "defaults", ekf)


def filters_section(filters: dict[str, dict[str, Any]]) -> list[str]:
    """report.md lines: which filter parameters each row used (files, why, the values that differ from defaults)."""
    lines = [
        "## Filter parameters per row",
        "",
        "| rows | parameter files | why | differs from the defaults |",
        "|---|---|---|---|",
    ]
    for rows, summary in filters.items():
        files = ", ".join(f"`{Path(f).name}`" for f in summary["params"]) or "—"
        changed = {
            **summary.get("filter", {}),
            **{f"predictor.{k}": v for k, v in summary.get("predictor", {}).items()},
        }
        text = ", ".join(f"{k} = {v}" for k, v in changed.items()) or "nothing"
        lines.append(f"| {rows} | {files} | {summary['source']} | {text} |")
    return [*lines, ""]
