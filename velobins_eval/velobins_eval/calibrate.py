"""``velobins calibrate``: fit the filter noise and the network's variance scale of a vehicle; write an overlay.

The filter's IMU noise densities decide how far it trusts the IMU against the network's velocity,
and the network variance scale s (R = s·σ̂², the predictor's ``variance_scale``) how far it trusts
the network. Both must describe the *real* measurement process: the network's own errors on
flights it was not trained on, which are larger than on its training flights and correlated in
time. Three sources of measurements (:func:`mode_of`):

* ``heldout`` (``--checkpoint CKPT --heldout FLIGHTS``): the checkpoint's estimates on flights it
  never trained on (:mod:`velobins_eval.calibrate_measure`);
* ``cross-fit`` (``--data FLIGHTS --cross-fit K``): short models trained on k − 1 folds predict
  the k-th, so every flight is predicted by a model that never saw it; the recipe is
  ``--checkpoint``'s or ``velobins train``'s defaults for ``--variant``;
* ``synthetic`` (neither): ground truth plus white noise of a known σ, which fits the filter's
  IMU noise alone (the network is not involved; s is not fitted).

The fit (:mod:`velobins_eval.calibrate_fit`) minimises a Gaussian negative log-likelihood per
update in log₁₀ space, widening its search where the fit lands on an edge and refusing a fit at a
field's limit; its curvature (:mod:`velobins_eval.calibrate_uncertainty`) says how well the
flights pin each value down. The report and the overlay YAML it writes are
:mod:`velobins_eval.calibrate_report`. docs/calibrate.md has the method, its measured results and its limits.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from velobins_common.errors import OptionError, UserError
from velobins_data.flight import Flight

from .calibrate_ensemble import disagreement_stage, folded
from .calibrate_errors import floor_start, own_scale, velocity_error_start
from .calibrate_fit import (
    AXES,
    DISAGREEMENT,
    FITTABLE,
    LIKELIHOODS,
    NETWORK_FITTABLE,
    SCALE,
    CalibrationFlight,
    CalibrationRefused,
    Objective,
    Point,
    log_limits,
    point_at,
    synthetic_measurements,
)
from .calibrate_folds import check_folds, kept
from .calibrate_search import SIMPLEX_STEP, fit_noise
from .calibrate_uncertainty import BLOCK_S, curvature

MODES = ("heldout", "cross-fit", "synthetic")
"""Where the velocity measurements come from (module docstring)."""
IMU_NOISE_SOURCES = ("auto", "allan", "synthetic", "network")
"""``--imu-noise``: take the IMU noise fields from the Allan variance of the IMU's error against ground truth that is
exact at the IMU rate (``allan``: simulated flights, static logs; :mod:`velobins_eval.calibrate_allan`), fit them to
ground truth + white noise of a known σ (``synthetic``: the filter's model is then exact), or jointly with s to the
network's estimates (``network``); ``auto`` is ``allan`` where the flights allow it, else ``synthetic``
(:func:`imu_stage`). docs/calibrate.md."""


def mode_of(args: argparse.Namespace) -> str:
    """The measurement source the options ask for (:data:`MODES`); both network modes at once is an error."""
    if args.heldout is not None and args.cross_fit is not None:
        raise OptionError("--heldout/--cross-fit", "give one (held-out flights, or cross-fitting on --data)")
    return "heldout" if args.heldout is not None else "cross-fit" if args.cross_fit is not None else "synthetic"


def spread(items: list, n: int | None) -> list:
    """At most ``n`` of ``items``, evenly spread (first and last kept): a subset covering every kind of flight."""
    if n is None or n >= len(items):
        return list(items)
    index = np.unique(np.round(np.linspace(0, len(items) - 1, n)).astype(int))
    return [items[i] for i in index]


@dataclass
class Inputs:
    """Everything ``calibrate`` reads, checked before any training or fitting."""

    mode: str
    start: Point
    """The 'before' filter and variance scale (defaults or ``--params``)."""
    flights: list[Flight]
    available: int
    """Flights loaded from ``path`` (before ``--max-flights``)."""
    notes: list[str]
    path: Path
    model: object = None
    """Held-out mode: the loaded network."""
    recipe: object = None
    """Cross-fit mode: the ``TrainConfig`` of the fold models."""
    folds: list = field(default_factory=list)
    """Cross-fit mode: the planned folds (:func:`velobins_eval.calibrate_measure.plan_cross_fit`)."""
    folds_dir: Path | None = None
    scratch: object = None
    """Cross-fit without ``--folds-dir``: the temporary directory of the fold models (removed at exit)."""

    def describe(self) -> str:
        seconds = sum(f.duration for f in self.flights)
        return (
            f"calibrating on {len(self.flights)} of {self.available} flight(s) ({seconds:.0f} s, {self.mode} "
            "measurements): " + ", ".join(f.name for f in self.flights)
        )

    def check_network(self, args: argparse.Namespace) -> None:
        """Held-out: the checkpoint loads, fits the flights and never trained on them. Cross-fit: the recipe fits
        the flights, there are enough of them for the folds, and ``--folds-dir`` holds nothing foreign."""
        if self.mode == "synthetic":
            return
        from velobins_net.checkpoint import MEMBERS_KEY, read_checkpoint

        from . import calibrate_measure as cm

        ckpt_path = args.checkpoint  # resolved by the command (a shipped name or a path)
        ckpt = read_checkpoint(ckpt_path) if ckpt_path is not None else None
        if ckpt is not None:
            method = (ckpt.get("model_config") or {}).get("method", "velobins")
            if method != "velobins":
                raise OptionError(
                    "--checkpoint",
                    f"{ckpt_path} is a {method} model; the variance scale is fitted for a velocity network "
                    "streaming body velocity (VeloBins or AI-IO)",
                )
        if self.mode == "heldout":
            from velobins_net.inference import load_checkpoint

            from .evaluate import check_fits

            self.notes += cm.check_heldout(ckpt, ckpt_path, self.flights)
            self.model = load_checkpoint(ckpt_path)
            defaulted = not getattr(args, "fit_given", True) and SCALE in args.fit and args.imu_noise != "network"
            if MEMBERS_KEY in ckpt and defaulted:  # an ensemble's default --fit weighs its disagreement too
                args.fit = (*args.fit, DISAGREEMENT)
            if DISAGREEMENT in args.fit and MEMBERS_KEY not in ckpt:
                raise OptionError(
                    "--fit",
                    f"{DISAGREEMENT} weighs an ensemble's disagreement: {ckpt_path} is one network "
                    "(combine several with velobins ensemble)",
                )
            check_fits(self.model, ckpt_path, self.flights)
            window = self.model.cfg.window_s
            short = [f.name for f in self.flights if f.duration <= window]
            if short:
                raise UserError(
                    f"{self.path}: flight(s) {', '.join(short)} shorter than one network window ({window:g} s)"
                )
            return
        if DISAGREEMENT in args.fit:
            raise OptionError("--fit", f"{DISAGREEMENT} needs an ensemble's estimates (--heldout), not cross-fitting")
        kinds = {(f.num_rotors, f.rotor_kind) for f in self.flights}
        if len(kinds) != 1:
            raise UserError(f"{self.path}: the flights mix rotor counts/kinds {sorted(kinds)}; calibrate one vehicle")
        if ckpt is not None:
            self.recipe = cm.recipe_from_checkpoint(ckpt, ckpt_path)
            want = (self.recipe.model.num_rotors, self.recipe.model.rotor_kind)
            if want not in kinds:
                raise UserError(
                    f"{ckpt_path}: its recipe trains {want[0]} rotors of kind '{want[1]}'; the flights of "
                    f"{self.path} have {sorted(kinds)[0][0]} of kind '{sorted(kinds)[0][1]}'"
                )
        else:
            self.recipe = cm.default_recipe(args.variant or "G+H", self.flights)
        if args.folds_dir is None:
            import tempfile

            self.scratch = tempfile.TemporaryDirectory(prefix="velobins-calibrate-folds-")
            self.folds_dir = Path(self.scratch.name)
        else:
            if args.folds_dir.exists() and not args.folds_dir.is_dir():
                raise OptionError("--folds-dir", f"{args.folds_dir} is a file, not a folder")
            self.folds_dir = args.folds_dir
        self.folds = cm.plan_cross_fit(self.flights, args.cross_fit, self.recipe, args.fold_minutes, self.folds_dir)


def synthetic(args: argparse.Namespace, flights: list[Flight]) -> list[CalibrationFlight]:
    """Ground truth + seeded N(0, ``--meas-sigma``²) measurements of every flight (one stream per flight)."""
    streams = np.random.SeedSequence(args.seed).spawn(len(flights))
    return [
        synthetic_measurements(s, args.meas_sigma, np.random.default_rng(ss))
        for s, ss in zip(flights, streams, strict=True)
    ]


def measurements(args: argparse.Namespace, inputs: Inputs, log: Callable[[str], None] = print) -> list:
    """The :class:`~velobins_eval.calibrate_fit.CalibrationFlight` list of the chosen mode."""
    if inputs.mode == "synthetic":
        return synthetic(args, inputs.flights)
    import torch

    from velobins_net.inference import load_predictor_config

    from . import calibrate_measure as cm

    torch.set_num_threads(args.threads)
    pcfg = load_predictor_config(args.params)
    if inputs.mode == "heldout":
        return cm.heldout_measurements(inputs.model, inputs.flights, pcfg)
    return cm.cross_fit_measurements(inputs.flights, inputs.folds, inputs.recipe, args.fold_minutes, pcfg, log)


@dataclass
class Stage:
    """One step of a calibration: what it fitted, where that leaves the filter, and how well the data pin it down."""

    label: str
    point: Point
    """The filter and s after this stage."""
    values: dict[str, float]
    """The fitted values by name."""
    passes: int
    """Filter passes over all flights (fit and curvature)."""
    lines: list[str]
    """What the report prints under it: a fit's widenings and uncertainty, or the Allan fit's lines."""
    objective: float = float("nan")
    """The objective per update at the stage's fit (NaN for the Allan stage, which runs no filter)."""


def run_stage(
    label: str,
    flights: list,
    start: Point,
    names,
    args: argparse.Namespace,
    log,
    initial: Point | None = None,
    kind: str | None = None,
    uncertainty: bool = True,
    step: float = SIMPLEX_STEP,
) -> Stage:
    """:func:`~velobins_eval.calibrate_search.fit_noise` of ``names`` on ``flights`` (objective ``kind``, else
    ``--objective``; its first simplex ``step``), then its curvature (skipped without ``uncertainty``: a profile's
    points)."""
    log(f"{label}: fitting {', '.join(names)}")
    objective = Objective(flights, kind or args.objective, args.workers)
    try:
        fit = fit_noise(objective, start, names, args.grid_points, args.max_evals, True, log, initial, step)
        if not uncertainty:
            return Stage(label, fit.point, fit.values, fit.evaluations, fit.widened, fit.objective)
        limits = [log_limits(n) for n in fit.names]
        curv = curvature(
            lambda x: objective.blocks(point_at(start, fit.names, x), BLOCK_S), fit.x, fit.names, limits,
            block_counts=objective.block_counts(BLOCK_S),
        )  # fmt: skip
    finally:
        objective.close()
    values = fit.values
    lines = curv.lines(values, likelihood=(kind or args.objective) in LIKELIHOODS)
    return Stage(label, fit.point, values, fit.evaluations + curv.evaluations, fit.widened + lines, fit.objective)


ALLAN_LABEL = "IMU noise by Allan variance against ground truth"


def allan_stage(flights: list[Flight], start: Point, names, log) -> Stage:
    """The IMU fields of ``names`` from the Allan variance of the IMU's error against ground truth
    (:func:`velobins_eval.calibrate_allan.allan_noise`): no filter pass; an unidentified random walk is kept."""
    from .calibrate_allan import allan_noise

    label = ALLAN_LABEL
    log(f"{label}: {', '.join(names)}")
    sensors = allan_noise(flights)
    values = {n: v for s in sensors.values() for n, v in s.values(names).items()}
    values = {n: values[n] for n in names if n in values}
    point = dataclasses.replace(start, config=dataclasses.replace(start.config, **values))
    return Stage(label, point, values, 0, [line for s in sensors.values() for line in s.lines(names)])


def imu_stage(
    args: argparse.Namespace, inputs: Inputs, point: Point, names: list[str], synthetic_flights: Callable[[], list], log
) -> Stage:
    """The IMU fields ``names`` (every one of them is one the Allan stage measures: ``ALLAN_FIELDS``).
    ``--imu-noise allan``: by Allan variance (refused where the truth does not allow it). ``auto`` (default): the
    same where the truth passes its checks, else, saying why, as ``synthetic``: fitted to ``synthetic_flights()``
    (ground truth + N(0, ``--meas-sigma``²)), which is called only then."""
    if args.imu_noise in ("allan", "auto"):
        try:
            return allan_stage(inputs.flights, point, names, log)
        except CalibrationRefused as exc:
            if args.imu_noise == "allan":
                raise
            log(f"the Allan variance is not usable on these flights, so the IMU noise is fitted instead: {exc}")
    names = fitted_by_likelihood(args, names, log)
    label = f"IMU noise on ground truth + N(0, {args.meas_sigma:g}²)"
    kind = args.objective if args.objective in LIKELIHOODS else "posterior"  # accuracy, crps: the network's fields
    stage = run_stage(label, synthetic_flights(), point.network_neutral(), names, args, log, kind=kind)
    return dataclasses.replace(stage, point=dataclasses.replace(point, config=stage.point.config))


def fitted_by_likelihood(args: argparse.Namespace, names: Sequence[str], log) -> list[str]:
    """``names`` less the fields the default ``--fit`` adds for the Allan stage only (``args.allan_only``: the
    initial bias sigmas), saying so. Fitted to measurements with the filter started from ground truth they favour
    values that do not carry over to a filter that starts itself (docs/calibrate.md); named in ``--fit`` they are
    fitted."""
    dropped = [n for n in names if n in getattr(args, "allan_only", ())]
    if dropped:
        log(f"the filter keeps its {', '.join(dropped)}: only the Allan variance measures them by default")
    return [n for n in names if n not in dropped]


def run_fit(args: argparse.Namespace, inputs: Inputs, flights: list, log: Callable[[str], None] = print):
    """(the fitted point, its stages). Without a network one stage sets the IMU fields of ``--fit``
    (:func:`imu_stage`; ``flights`` are then the synthetic measurements). With one, ``--imu-noise auto`` (default),
    ``allan`` or ``synthetic`` set the IMU fields first, then fit s alone to the network's estimates;
    ``--imu-noise network`` fits all of ``--fit`` to the network's estimates at once. s starts where it fits the
    network's own errors best (mean e²/σ̂²)."""
    if inputs.mode == "synthetic":
        stage = imu_stage(args, inputs, inputs.start, list(args.fit), lambda: flights, log)
        return stage.point, [stage]
    start = floor_start(velocity_error_start(inputs.start, flights, args.fit, log), flights, args.fit, log)
    initial = dataclasses.replace(start, scale=own_scale(flights)) if SCALE in args.fit else None
    if initial is not None:
        log(f"s starts at {initial.scale:.4g} (mean e²/σ̂² of the network's estimates)")
    if args.imu_noise == "network":
        names = fitted_by_likelihood(args, args.fit, log)
        stage = run_stage("joint fit on the network's estimates", flights, start, names, args, log, initial)
        return stage.point, [stage]
    stages = []
    point = start
    imu = [n for n in args.fit if n not in NETWORK_FITTABLE]
    if imu:
        stages.append(imu_stage(args, inputs, point, imu, lambda: synthetic(args, inputs.flights), log))
        point = stages[-1].point
    network = [n for n in args.fit if n in NETWORK_FITTABLE and n not in AXES]
    if network:
        initial = dataclasses.replace(point, scale=initial.scale) if initial is not None else None
        if DISAGREEMENT in network:
            names = [n for n in network if n != DISAGREEMENT]
            label = "ensemble variance scale and disagreement weight"
            stage = disagreement_stage(
                f"{label} on its estimates", flights, point, names, args, log, initial, run_stage
            )
            stages.append(stage)
        else:
            label = "network variance scale" if network == [SCALE] else "network error model"
            stages.append(run_stage(f"{label} on its estimates", flights, point, network, args, log, initial))
        point = stages[-1].point
    axes = [n for n in args.fit if n in AXES]
    if axes:
        stages.append(axis_stage(flights, point, axes, args, log))
        point = stages[-1].point
    return point, stages


def axis_stage(flights: list, point: Point, names: Sequence[str], args: argparse.Namespace, log) -> Stage:
    """The axis factors ``names`` (of :data:`AXES`) on the network's estimates with s and b held at ``point``'s (an
    ensemble's disagreement folded in at b/s): how the fitted R = s·σ̂² + b·d̄ is shared between the body axes. s and
    k are not separable (s·k is what counts), so they are fitted in turn, s first, which keeps s the overall scale
    and k near 1 where the network's σ̂ already balances its axes (docs/calibrate.md, "Per-axis factors").

    Then, with ``--axis-folds`` K ≥ 2 and two flights or more, the check by folds of flights
    (:mod:`velobins_eval.calibrate_folds`): where factors fitted on the other flights raise the held-out flights'
    objective (or their fused AVE, ``--axis-check-by accuracy``), the stage keeps ``point``'s factors and says why."""
    data = folded(flights, point.ratio)
    label = f"per-axis variance factors on its estimates (s {point.scale:.4g}, b {point.disagreement:.4g} held)"
    stage = run_stage(label, data, point, names, args, log)
    if args.axis_folds == 0 or len(data) < 2:
        if args.axis_folds:
            stage.lines.append("not checked by folds of flights: one flight")
        return stage

    def fit(rest: list, i: int) -> tuple[Point, int]:
        st = run_stage(f"{label}, fold {i} held out", rest, point, names, args, log, uncertainty=False)
        return st.point, st.passes

    check = check_folds(data, point, args.axis_folds, fit, args.objective, args.workers, args.axis_check_by)
    final = kept(point, check, stage.point)
    return dataclasses.replace(
        stage,
        label=stage.label if check.carries else f"{label}, kept at the start's by the check by folds of flights",
        point=final,
        values={n: final.value(n) for n in names},
        passes=stage.passes + check.passes,
        lines=stage.lines + check.lines(),
    )


def fitted_values(stages: list[Stage]) -> dict[str, float]:
    """Every fitted field, in the order of the stages."""
    return {n: v for st in stages for n, v in st.values.items()}


def kept_values(start: Point, default: Point, fitted: dict[str, float]) -> dict[str, float]:
    """The fittable fields (:data:`FITTABLE`) that ``--params`` set (``start`` differs from ``default``, the
    node's values) and this run did not fit: the overlay carries them too, so it alone sets everything calibrate
    owns. A final model's s fitted with ``--params cross_fit.yaml --fit variance_scale`` then keeps the cross-fit's
    IMU densities, and one ``params_file`` launches the vehicle."""
    return {n: start.value(n) for n in FITTABLE if n not in fitted and start.value(n) != default.value(n)}


def load(args: argparse.Namespace, path: Path) -> tuple[list[Flight], list[str]]:
    """Validated flights under ``path`` and the 'skipped' lines of the files that held none."""
    import warnings

    from velobins_data.datasets import load_flights

    with warnings.catch_warnings():  # the skipped files are printed once, as lines, by the caller
        warnings.simplefilter("ignore", UserWarning)
        loaded = load_flights(args.dataset, path, allow=tuple(args.allow))
    return list(loaded.sequences), [f"skipped {i.path}: {i.reason}" for i in loaded.skipped]
