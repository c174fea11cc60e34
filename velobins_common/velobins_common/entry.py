"""The node executables' shared entry point: import the node, then run it; a stop during the import is quiet.

A node's module imports rclpy, numpy and often torch: seconds on a cold start, more when Python first
compiles the ``.pyc`` files of a fresh install. A launch stopped in those seconds (Ctrl-C, a sibling that
died, the end of a replay) sends SIGINT, which Python raises as ``KeyboardInterrupt`` inside the import,
and the interpreter prints that traceback, up to ``_compile_bytecode``, for a node that did nothing wrong.

So every node executable (``velobins_ekf_node``, ``velobins_net_node``, the bridges, replay and eval) is
installed as this module's :func:`main`, and each package names its node's real ``main`` under the
entry-point group :data:`GROUP` by the same executable name (its ``setup.py``). :func:`main` looks the
name up and imports the node where the interrupt can be caught: a node stopped before it started exits
with status 0, as one stopped after it started does (``velobins_ros.run_node``). What is left unguarded is
the interpreter's own start and the installed script's few imports before it reaches :func:`main`.

This module imports nothing of VeloBins: the lowest layer stays the lowest (``test_architecture.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

GROUP = "velobins.nodes"
"""Entry-point group naming each node executable's real ``main`` (``<executable> = <module>:main``)."""

STOPPED_BEFORE_START = 0
"""Exit status of a node stopped (SIGINT) while it was still importing: a requested stop, not a failure."""

NO_SUCH_NODE = 2
"""Exit status when the executable's name has no entry under :data:`GROUP`: a broken install."""


def run(load: Callable[[], Callable[[], object]]) -> None:
    """Import a node's ``main`` with ``load()`` and call it; ``KeyboardInterrupt`` during the import ends
    the process with :data:`STOPPED_BEFORE_START` and no traceback. Once ``main`` runs, its own signal
    handling applies."""
    try:
        node_main = load()
    except KeyboardInterrupt:
        raise SystemExit(STOPPED_BEFORE_START) from None
    node_main()


def main() -> None:
    """Entry point of every node executable: run the node registered under :data:`GROUP` by this
    executable's name (``sys.argv[0]``). The lookup is inside :func:`run`'s guard too: it reads every
    installed distribution's metadata, which takes a moment of its own."""
    name = Path(sys.argv[0]).name

    def load() -> Callable[[], object]:
        found = list(entry_points(group=GROUP, name=name))
        if not found:
            print(
                f"{name}: no node of that name in the entry-point group {GROUP!r}; "
                "reinstall the workspace (scripts/bootstrap.sh)",
                file=sys.stderr,
            )
            raise SystemExit(NO_SUCH_NODE)
        return found[0].load()

    run(load)
