"""The dataset kinds the adapters read: a module light enough for every command's option parser.

:mod:`velobins_eval.datasets` maps each kind to its adapter; the command line builds its
``--dataset`` choices from here without importing the adapters (numpy, scipy, h5py, rosbags).
"""

KINDS = ("nanobench", "aiio", "tiiratm", "neurobem", "csv")
"""Source kinds understood by :func:`velobins_eval.datasets.load_sequence` and ``--dataset``."""
