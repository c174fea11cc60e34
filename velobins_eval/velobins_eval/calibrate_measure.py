"""The velocity measurements ``velobins calibrate`` fits to: the network's own estimates on flights it never saw.

The filter must absorb the network's *real* errors: biased, time-correlated (consecutive 20 Hz
estimates share most of their 1 s window) and larger on flights the network was not trained on.
Only estimates on unseen flights show them, so there are two sources:

* **held-out** (:func:`heldout_measurements`): a trained checkpoint on flights outside its
  training set (checked against the flight names the checkpoint records:
  :func:`check_heldout`);
* **cross-fitting** (:func:`cross_fit_measurements`): the flights are split into k folds by flight
  (:func:`assign_folds`); for each fold a short model is trained on the other k − 1 folds with a
  given recipe under a time budget, and predicts the fold. Every flight's estimates then come from
  a model that never saw it, and no separate checkpoint is needed: the calibration can come
  before the real training. The checkpoint of each fold model is picked on the last
  :data:`SELECTION_SHARE` of every training flight (windows held out from every flight, not one or
  two whole flights).

Both run the network as the node does (:func:`velobins_eval.evaluate.predict_flight`) with the
variance unscaled (``variance_scale`` = 1): the scale is what the fit then estimates.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from velobins_common.errors import OptionError, UserError
from velobins_data.flight import Flight

from .calibrate_fit import UNIT_AXES, CalibrationFlight
from .calibrate_folds import fold_indices

SELECTION_SHARE = 0.2
"""Share of each training flight's samples (its end) a fold model validates on to pick its checkpoint."""
FOLD_FILE = "fold.json"
"""What a fold directory of ``--folds-dir`` was made from: its flights, the recipe and the budget."""
PREDICTIONS_FILE = "predictions.npz"
"""A finished fold: the fold model's estimates on its held-out flights."""


def unscaled(pcfg):
    """``pcfg`` (a ``PredictorConfig``) with ``variance_scale`` = 1, ``disagreement_scale`` = 0 and the axis factors
    1: the network's own σ̂² (an ensemble's: the mixture's)."""
    return dataclasses.replace(pcfg, variance_scale=1.0, disagreement_scale=0.0, axis_variance_factors=UNIT_AXES)


def heldout_measurements(model, flights: Sequence[Flight], pcfg, progress: bool = True) -> list[CalibrationFlight]:
    """The network's estimates (t, v̂, σ̂²) on each flight, as the node computes them, variance unscaled; for an
    ensemble also its disagreement, averaged as the predictor averages it (``disagreement_tau``)."""
    from velobins_common.progress import progress_bar

    from .evaluate import predict_flight

    out = []
    for flight in progress_bar(flights, desc="network on held-out", unit="flight", enabled=progress):
        t, v, var, dis = predict_flight(model, flight, unscaled(pcfg), disagreement=True)
        out.append(CalibrationFlight(flight, t, v, var, dis if np.any(dis) else None))
    return out


def check_heldout(ckpt: dict, path: Path, flights: Sequence[Flight]) -> list[str]:
    """Refuse held-out flights the checkpoint was trained on (by the names it records); note lines for flights
    that picked its epoch (outside training, but not a clean hold-out)."""
    data = ckpt.get("data") or {}
    names = {str(d.get("name")) for d in data.get("train") or [] if isinstance(d, dict)}
    selected = {str(d.get("name")) for d in data.get("val") or [] if isinstance(d, dict)}
    seen = sorted(f.name for f in flights if f.name in names)
    if seen:
        raise UserError(
            f"{path}: the checkpoint was trained on {', '.join(seen)}: held-out flights must be new to it "
            "(--heldout), or calibrate by cross-fitting (--cross-fit K)"
        )
    notes = sorted(f.name for f in flights if f.name in selected)
    if not names:
        return [f"note: {path} records no training flights; cannot check that --heldout is new to it"]
    return [f"note: {', '.join(notes)} picked the checkpoint's epoch (not trained on)"] if notes else []


def recipe_from_checkpoint(ckpt: dict, path: Path):
    """The ``TrainConfig`` a checkpoint was trained with (fields this version does not know are dropped)."""
    from velobins_net.config import ModelConfig
    from velobins_net.train import TrainConfig

    stored = dict(ckpt.get("train_config") or {})
    if "model" not in stored or "variant" not in stored:
        raise UserError(f"{path}: the checkpoint records no training recipe ('train_config'); pass --variant instead")
    known = {f.name for f in dataclasses.fields(TrainConfig)} - {"model", "members"}  # a fold model is one network
    values = {k: v for k, v in stored.items() if k in known}
    return TrainConfig(model=ModelConfig.from_dict(stored["model"], source=str(path)), **values)


def default_recipe(variant: str, flights: Sequence[Flight]):
    """``velobins train``'s defaults (its default recipe) for ``variant`` on these flights' rotors, for one network
    (a fold model: its estimates stand for the final model's network, ensemble or not)."""
    from velobins_net.config import ModelConfig
    from velobins_net.schedule import DEFAULT_RECIPE, RECIPES
    from velobins_net.train import TrainConfig

    model = ModelConfig(num_rotors=flights[0].num_rotors, rotor_kind=flights[0].rotor_kind)
    return TrainConfig(model=model, variant=variant, **(RECIPES[DEFAULT_RECIPE] | {"members": 1}))


def assign_folds(flights: Sequence[Flight], k: int) -> list[list[int]]:
    """Indices of ``flights`` in the cross-fit's ``k`` folds (:func:`velobins_eval.calibrate_folds.fold_indices`: of
    near-equal total duration, each holding at least one flight), or the option error of a ``k`` that cannot."""
    if k < 2:
        raise OptionError("--cross-fit", f"must be >= 2 folds, got {k}")
    if len(flights) < k:
        raise OptionError("--cross-fit", f"{k} folds need at least {k} flights, got {len(flights)}")
    return fold_indices(flights, k)


def split_for_selection(flights: Sequence[Flight], window_s: float) -> tuple[list[Flight], list[Flight]]:
    """(first 1 − :data:`SELECTION_SHARE`, last :data:`SELECTION_SHARE`) of every flight: training and selection
    parts (:func:`velobins_net.data.split_tails`, as ``velobins train --val-split tails``)."""
    from velobins_net.data import split_tails

    try:
        return split_tails(flights, SELECTION_SHARE, window_s)
    except ValueError as exc:
        raise UserError(f"cross-fit: {exc}, for checkpoint selection") from None


def fold_record(names: list[str], heldout: list[str], recipe, minutes: float) -> dict:
    """The identity of one fold model (``fold.json``): a fold directory is reused only when it matches."""
    cfg = dataclasses.asdict(recipe) | {"model": recipe.model.to_dict(), "progress": None, "data_description": None}
    return {"train": names, "heldout": heldout, "recipe": cfg, "fold_minutes": minutes}


@dataclasses.dataclass
class Fold:
    """One fold of a cross-fit: the flights it holds out, those its model trains on, where the model lives."""

    number: int
    held: list[int]
    rest: list[int]
    record: dict
    """Its identity (``fold.json``): flights, recipe, budget."""
    directory: Path
    preds: dict | None
    """A finished fold's predictions read back from ``directory`` (None: to be trained)."""


def plan_cross_fit(flights: Sequence[Flight], k: int, recipe, minutes: float, folds_dir: Path) -> list[Fold]:
    """The k folds (:func:`assign_folds`), each checked against what ``folds_dir/fold<i>`` already holds (reused
    when finished from the same flights, recipe and budget; refused when foreign), before any training."""
    recipe = dataclasses.replace(recipe, time_budget=minutes, resume=None, progress=False)
    folds = []
    for number, held in enumerate(assign_folds(flights, k), start=1):
        rest = [i for i in range(len(flights)) if i not in held]
        record = fold_record([flights[i].name for i in rest], [flights[i].name for i in held], recipe, minutes)
        directory = folds_dir / f"fold{number}"
        folds.append(Fold(number, held, rest, record, directory, load_fold(directory, record)))
    split_for_selection([flights[i] for i in folds[0].rest], recipe.model.window_s)  # too-short flights fail now
    return folds


def cross_fit_measurements(
    flights: Sequence[Flight],
    folds: Sequence[Fold],
    recipe,
    minutes: float,
    pcfg,
    log: Callable[[str], None] = print,
) -> list[CalibrationFlight]:
    """Estimates on every flight from a model trained on the other folds (module docstring), in ``flights``' order.

    ``recipe`` is a ``TrainConfig`` (its ``time_budget`` becomes ``minutes``); ``folds`` come from
    :func:`plan_cross_fit`. Finished folds are reused; the others are trained and marked finished with their
    predictions, so an interrupted calibration resumes at the first unfinished fold.
    """
    from velobins_net.inference import load_checkpoint
    from velobins_net.train import train

    from .evaluate import check_fits, predict_flight

    recipe = dataclasses.replace(recipe, time_budget=minutes, resume=None, progress=False)
    by_flight: dict[int, CalibrationFlight] = {}
    for fold in folds:
        preds = fold.preds
        if preds is None:
            train_part, val_part = split_for_selection([flights[i] for i in fold.rest], recipe.model.window_s)
            log(
                f"fold {fold.number}/{len(folds)}: training {recipe.variant} on {len(fold.rest)} flight(s) for "
                f"{minutes:g} min, to predict {', '.join(flights[i].name for i in fold.held)}"
            )
            mark_fold(fold.directory, fold.record)
            desc = (
                f"calibrate cross-fit fold {fold.number}/{len(folds)}: {len(fold.rest)} flights, "
                f"checkpoint picked on the last {SELECTION_SHARE:.0%} of each"
            )
            result = train(dataclasses.replace(recipe, data_description=desc), train_part, val_part, fold.directory)
            if result.best_epoch < 0:
                raise UserError(f"{fold.directory}: fold {fold.number}'s training gave no finite validation figure")
            model = load_checkpoint(result.best_path)
            check_fits(model, result.best_path, [flights[i] for i in fold.held])
            preds = {flights[i].name: predict_flight(model, flights[i], unscaled(pcfg)) for i in fold.held}
            mark_fold(fold.directory, fold.record, result, preds)
            last = result.history[-1] if result.history else None
            log(
                f"fold {fold.number}: {len(result.history)} epochs, best {result.best_epoch}"
                + (f" ({last.elapsed_s:.0f} s)" if last is not None else "")
            )
        else:
            log(f"fold {fold.number}/{len(folds)}: reusing {fold.directory}")
        for i in fold.held:
            t, v, var = preds[flights[i].name]
            by_flight[i] = CalibrationFlight(flights[i], t, v, var)
    return [by_flight[i] for i in range(len(flights))]


def load_fold(fold_dir: Path, record: dict) -> dict | None:
    """A finished fold's predictions when ``fold_dir`` holds one made from ``record``; None when the fold must be
    trained (no directory, an empty one, or an unfinished fold of the same record, whose files are calibrate's own).
    Anything else in ``fold_dir`` is refused: it is not ours to replace."""
    meta = fold_dir / FOLD_FILE
    if not fold_dir.exists() or not any(fold_dir.iterdir()):
        return None
    try:
        stored = json.loads(meta.read_text())
    except FileNotFoundError:
        raise UserError(f"{fold_dir}: holds files that are not a calibrate fold; pick another --folds-dir") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{meta}: not a fold record ({exc})") from None
    if not isinstance(stored, dict) or stored.get("fold") != json.loads(json.dumps(record)):
        raise UserError(
            f"{meta}: this fold was made from other flights, recipe or budget; remove it or pick another --folds-dir"
        )
    if not stored.get("finished"):
        return None
    with np.load(fold_dir / PREDICTIONS_FILE) as data:
        return {name: (data[f"{name}/t"], data[f"{name}/v"], data[f"{name}/var"]) for name in record["heldout"]}


def mark_fold(fold_dir: Path, record: dict, result=None, preds: dict | None = None) -> None:
    """Write ``fold.json``: before training (unfinished), and once the predictions are saved (finished, with the
    fold model's best epoch and validation NLL)."""
    import io

    from velobins_common.outputs import atomic_write_text

    fold_dir.mkdir(parents=True, exist_ok=True)
    content: dict = {"fold": record, "finished": preds is not None}
    if preds is not None:
        buf = io.BytesIO()
        arrays = {f"{n}/{key}": a for n, tva in preds.items() for key, a in zip(("t", "v", "var"), tva, strict=True)}
        np.savez(buf, **arrays)
        tmp = fold_dir / (PREDICTIONS_FILE + ".tmp")
        tmp.write_bytes(buf.getvalue())
        tmp.replace(fold_dir / PREDICTIONS_FILE)
    if result is not None:
        content["best_epoch"], content["epochs"] = result.best_epoch, len(result.history)
        best = [h for h in result.history if h.epoch == result.best_epoch]
        if best and math.isfinite(best[0].val_nll):
            content["best_val_nll"] = best[0].val_nll
    atomic_write_text(fold_dir / FOLD_FILE, json.dumps(content, indent=1, sort_keys=True) + "\n")
