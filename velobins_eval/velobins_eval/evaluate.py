"""Scoring flights: network alone and EKF-fused, offline or from a recorded ROS graph run.

One path for every number in a report (paper §IV-A, docs/design.md "Metrics"):

* :func:`predict_flight` runs the network with the same :class:`StreamingPredictor` the network
  node uses (same windows, same 20 Hz schedule, same variance scale);
* :func:`fuse_flight` runs the same :class:`VelocityEkf` the EKF node uses, started from ground
  truth (no alignment), and keeps the fused state right after each update;
* :func:`~velobins_eval.scoring.score` (in :mod:`velobins_eval.scoring`, re-exported here with
  :class:`FlightRecord` and :class:`GroundTruth`) turns a record, offline or recorded by the eval
  node from topics, into :class:`~velobins_eval.metrics.FlightMetrics`;
* :func:`imu_only_flight` is the IMU-integration baseline: the same filter with no updates;
* the Table I baselines whose network reads the filter's attitude (TLIO, EqNIO, IMO, AirIO) run
  network and filter as one loop (:func:`velobins_eval.closed_loop.closed_loop_flight`).

``velobins evaluate`` (:mod:`velobins_eval.cli.evaluate`) applies this to checkpoints on a directory of flights
and writes the report of :mod:`velobins_eval.report`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from velobins_common.errors import UserError
from velobins_common.outputs import Run, RunLayout
from velobins_data.flight import Flight

from . import metrics
from .closed_loop import closed_loop_flight, ground_truth_state, record_of_run
from .report import method_label, write_report
from .scoring import FlightRecord
from .scoring import score as score  # re-exported: callers of velobins_eval.evaluate.score


def load_ekf_config(params_files: list[Path] | None = None):
    """EkfConfig from its defaults plus the ``velobins_ekf: ros__parameters: filter:`` overrides of
    ROS parameter files (the same files the EKF node loads), applied in order.

    A file that is missing, not YAML, not a mapping, or that sets an unknown key or a value of
    the wrong type raises ``ValueError`` naming the file and the key (the EKF owns the reading:
    :func:`velobins_ekf.params.load_filter_config`).
    """
    from velobins_ekf.params import load_filter_config

    return load_filter_config(params_files)


def predict_flight(
    model, seq: Flight, config=None, uncertainty: str | None = None, disagreement: bool = False
) -> tuple[np.ndarray, ...]:
    """Network estimates over a flight as the node computes them: (t (U,), v (U, 3), var (U, 3)), and with
    ``disagreement`` a fourth (U, 3): an ensemble's averaged disagreement (:class:`Prediction`'s; zeros for one
    network).

    ``config`` is the node's :class:`~velobins_net.inference.PredictorConfig` (``predictor.*``
    of the same parameter files, :func:`velobins_net.inference.load_predictor_config`; defaults
    when None); ``uncertainty`` (``B``, ``C``, ``B+C``) overrides its variance source. The samples
    go through the node's :class:`~velobins_net.inference.StreamingPredictor`, so the windows
    (anti-alias filter included), the 20 Hz schedule on IMU time
    (:func:`~velobins_net.inference.next_update_slot`) and the variance (decoded, times
    ``config.variance_scale``) are the node's.
    """
    import dataclasses

    from velobins_net.inference import PredictorConfig, StreamingPredictor

    config = config or PredictorConfig()
    if uncertainty:
        config = dataclasses.replace(config, uncertainty=uncertainty)
    predictor = StreamingPredictor(model, config)
    ts, vs, vars_, dis = [], [], [], []
    for i in range(len(seq)):
        t = float(seq.t[i])
        predictor.push_rotor(t, seq.rotor[i])
        predictor.push_imu(t, seq.acc[i], seq.gyro[i])
        pred = predictor.step()
        if pred is not None:
            ts.append(pred.stamp)
            vs.append(pred.velocity)
            vars_.append(pred.variance)
            dis.append(pred.disagreement if pred.disagreement is not None else np.zeros(3))
    if not ts:
        raise UserError(f"{seq.source}: flight too short for one network window ({seq.duration:.2f} s)")
    out = (np.asarray(ts), np.asarray(vs), np.asarray(vars_))
    return (*out, np.asarray(dis)) if disagreement else out


def fuse_flight(seq: Flight, t: np.ndarray, v: np.ndarray, var: np.ndarray, method: str, ekf_config=None):
    """EKF-fused record of a flight given network estimates (filter started from ground truth)."""
    from velobins_ekf.offline import run_offline

    res = run_offline(seq.t, seq.acc, seq.gyro, t, v, var, init_state=ground_truth_state(seq), config=ekf_config)
    ups = [u for u in res.updates if u.accepted]
    if not ups:
        raise UserError(f"{seq.source}: the filter applied no update (stats: {res.stats})")
    index = np.searchsorted(t, np.array([u.stamp for u in ups]))
    return record_of_run(seq, method, ups, res, v[index], var[index])


def imu_only_flight(seq: Flight, t_eval: np.ndarray, ekf_config=None) -> FlightRecord:
    """IMU integration from the ground-truth start (the EKF with no updates), sampled at ``t_eval``."""
    from velobins_ekf.offline import run_offline

    empty = np.empty((0, 3))
    res = run_offline(
        seq.t,
        seq.acc,
        seq.gyro,
        np.empty(0),
        empty,
        np.empty((0, 3, 3)),
        ground_truth_state(seq),
        config=ekf_config,
        keep_updates=False,
    )
    from scipy.spatial.transform import Rotation, Slerp

    nan3 = np.full((t_eval.size, 3), np.nan)
    rot = Rotation.from_matrix(res.rot)
    return FlightRecord(
        seq.name,
        "imu-only",
        t_eval,
        nan3,
        nan3,
        metrics.interp_columns(t_eval, res.t, res.pos),
        metrics.interp_columns(t_eval, res.t, res.vel),
        np.full((t_eval.size, 3, 3), np.nan),
        res.t,
        res.pos,
        q_fused=Slerp(res.t, rot)(t_eval).as_quat(),
        q_traj=rot.as_quat(),
        v_traj=res.vel,
    )


EVALUATE_LAYOUT = RunLayout(
    "evaluate",
    ("metrics.json", "metrics.md", "config.json", "plots", "report.md", "report.html", "estimates"),
    resumable=False,
)
"""What ``velobins evaluate`` owns in ``--out`` (the report of :mod:`velobins_eval.report`)."""


def model_params(overlay: Path | None, params: list[Path]) -> tuple[list[Path], str]:
    """The parameter files one checkpoint is evaluated with, and why: ``--params`` when given (for every
    checkpoint), else the shipped model's own overlay (``--checkpoint crazyflie`` brings ``crazyflie.yaml``),
    else none (the defaults)."""
    if params:
        return list(params), "--params"
    if overlay is not None:
        return [overlay], "the shipped model's overlay"
    return [], "defaults"


def filter_summary(files: list[Path], source: str, ekf_config, predictor_config=None) -> dict:
    """What a report says about one row's filter: its parameter files, why, and the values that differ from the
    defaults (``filter`` fields of :class:`~velobins_ekf.config.EkfConfig`, ``predictor`` fields of
    :class:`~velobins_net.inference.PredictorConfig`)."""
    from velobins_ekf.config import EkfConfig

    def changed(config, default) -> dict:
        if config is None:
            return {}
        new, old = dataclasses.asdict(config), dataclasses.asdict(default)
        return {k: v for k, v in new.items() if v != old[k]}

    summary = {"params": [str(f) for f in files], "source": source, "filter": changed(ekf_config, EkfConfig())}
    if predictor_config is not None:
        from velobins_net.inference import PredictorConfig

        summary["predictor"] = changed(predictor_config, PredictorConfig())
    return summary


def check_fits(model, path: Path, seqs: list[Flight]) -> None:
    """Raise ``UserError`` unless every flight has the rotor count and kind ``model`` was trained on.

    The input normalisation and the encoder's input width depend on both; a PWM model fed rad/s
    (or four rotor columns fed to a six-rotor model) scores garbage without any other error.
    """
    want = (model.cfg.num_rotors, model.cfg.rotor_kind)
    for seq in seqs:
        got = (seq.num_rotors, seq.rotor_kind)
        if got != want:
            raise UserError(
                f"{path}: checkpoint does not fit flight {seq.source}: it was trained on {want[0]} rotors of kind "
                f"'{want[1]}', the flight has {got[0]} rotors of kind '{got[1]}'"
            )


def evaluate_checkpoint(
    path: Path, seqs: list[Flight], ekf_config=None, progress: bool = True, predictor_config=None, label=None
):
    """(method label, {flight: record}) of one checkpoint on ``seqs`` (checked to fit them first).

    ``label`` names the method in the report (default: the checkpoint's variant).
    """
    from velobins_common.progress import progress_bar
    from velobins_net.inference import load_checkpoint

    model = load_checkpoint(path)
    check_fits(model, path, seqs)
    label = label or method_label(path)
    records = {}
    for seq in progress_bar(seqs, desc=f"evaluating {label}", unit="flight", enabled=progress):
        records[seq.name] = flight_record(model, seq, label, predictor_config, ekf_config)
    return label, records


def flight_record(model, seq: Flight, label: str, predictor_config=None, ekf_config=None, uncertainty=None):
    """EKF-fused :class:`FlightRecord` of one model on one flight, by the path its method needs: the
    network alone then the filter (:func:`predict_flight`, :func:`fuse_flight`), or, when the network
    reads the filter's attitude or gives displacements, both as one loop
    (:func:`velobins_eval.closed_loop.closed_loop_flight`)."""
    if uncertainty:
        predictor_config = dataclasses.replace(predictor_config or _predictor_defaults(), uncertainty=uncertainty)
    if model.cfg.attitude_input or model.cfg.output_kind != "velocity":
        return closed_loop_flight(model, seq, label, predictor_config, ekf_config)
    t, v, var = predict_flight(model, seq, predictor_config)
    return fuse_flight(seq, t, v, var, label, ekf_config)


def _predictor_defaults():
    from velobins_net.inference import PredictorConfig

    return PredictorConfig()


def write_report_atomically(
    records, gts, run: Run, config: dict, filters: dict | None = None, mcap: bool = True, title: str | None = None
) -> str:
    """:func:`~velobins_eval.report.write_report` into the run's staging folder, then commit it.

    A failure while writing (disk full, Ctrl-C) leaves ``--out`` as it was; an earlier report
    there (``--overwrite``) is replaced whole, every old plot included, only once the new one is
    complete (:meth:`velobins_common.outputs.Run.commit`).
    """
    table = write_report(
        records, gts, run.path, config, filters=filters, mcap=mcap, title=title or "VeloBins evaluation"
    )
    run.commit()
    return table
