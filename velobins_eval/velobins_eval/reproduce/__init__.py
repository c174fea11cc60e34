"""``velobins reproduce``: regenerate the paper's NanoBench evidence (Tables II/III, Fig. bins, Fig. nees).

One command trains every model the ablations need, scores each Table II / III row and the bin sweep
on every flight of each evaluation split (network alone and EKF-fused, through the same code paths
as ``velobins evaluate``: :func:`~velobins_eval.evaluate.predict_flight`,
:func:`~velobins_eval.evaluate.fuse_flight`, :func:`~velobins_eval.scoring.score`), and writes
``<out>/<split>/{metrics.json, report.md, config.json, figures/*.png}`` (docs/reproduce.md).

The package, in the order a run goes through it (:mod:`velobins_eval.cli.reproduce` parses,
``commands`` orchestrates, the others do the work):

* :mod:`.commands` — check, lock ``<out>``, train, evaluate, report;
* :mod:`.plan` — schedules, row names, the trainings and evaluation units, the output layout;
* :mod:`.manifest` — ``<out>/reproduce.json`` and the checks made before any work;
* :mod:`.engine` — the job engine: submitit, local processes (``--jobs`` at once) or Slurm job arrays;
* :mod:`.tasks` — the jobs: a training (resumed where it stopped), an evaluation unit, an IMU-only baseline;
* :mod:`.evaluation` — one unit scored on a split (the code paths of ``velobins evaluate``);
* :mod:`.results` — one result file per evaluation unit (what makes a re-run compute only what is missing);
* :mod:`.summary` — rows over seeds, the IMU-only baseline, the ``metrics.json`` document;
* :mod:`.tables`, :mod:`.paper`, :mod:`.figures`, :mod:`.render` — the report of a split;
* :mod:`.errors` — :class:`~.errors.ReproduceError`.

Tables, the metrics writer and the plot helpers are :mod:`velobins_eval.report`'s, shared with
``velobins evaluate``.

Outputs (issue 13): ``<out>`` is locked for the whole command (a second ``reproduce`` into it fails
at once, naming the holder); ``<out>/reproduce.json`` records the plan (schedule, seeds, dataset,
data directories, EKF parameters) and a run of another plan is refused unless ``--overwrite``
removes the earlier reproduction; every report, table and figure is written atomically.
"""

from __future__ import annotations
