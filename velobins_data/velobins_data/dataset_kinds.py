"""The dataset kinds: a module light enough for any parser.

:mod:`velobins_data.datasets` maps each kind to its adapter; the command line builds its
``--dataset`` choices from here without importing the adapters (numpy, scipy, h5py, rosbags).
"""

from __future__ import annotations

KINDS = ("nanobench", "aiio", "tiiratm", "neurobem", "csv", "rosbag")
"""Source kinds understood by :func:`velobins_data.datasets.load_flight` and ``--dataset``."""
