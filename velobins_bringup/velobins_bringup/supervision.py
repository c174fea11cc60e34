"""Supervision of the launch files' nodes: a node that dies or cannot start ends the launch, non-zero.

``ros2 launch`` by itself logs "process has died" and keeps the rest running: kill the EKF and the
network goes on publishing velocities nobody fuses, with no odometry and no TF; a corrupt model ends
the network node while the EKF runs on and the launch exits 0 (issue 23). Here every VeloBins node
of ``drone.launch.py`` and ``replay_eval.launch.py`` carries an ``on_exit`` handler that decides
(:func:`decide`) what its exit means:

* while the launch shuts down (Ctrl-C, its end): nothing;
* with :data:`~velobins_ros.CANNOT_START` (2: bad model, bad parameter): the launch stops with a
  non-zero status, also with ``respawn:=true`` (a restart would only fail again);
* with status 0 at its expected end (replay, eval): what the launch file says (the eval node's
  end shuts the launch down normally);
* otherwise (killed, crashed, exited by itself): the launch stops with a non-zero status
  (default), or, with ``respawn:=true``, launch restarts the node after ``respawn_delay`` seconds.

"Stop the launch" raises :class:`StackStopped` from the handler: the launch service logs its one
line (``Caught exception in launch (see debug for traceback): velobins_ekf died (killed by
SIGKILL): ...``), stops every other process (SIGINT, then SIGTERM and SIGKILL after launch's
timeouts) and returns 1, which ``ros2 launch`` exits with. Raising is the only way the launch system
gives a non-zero status: an emitted ``Shutdown`` event ends it with 0.

The restart itself is launch's own (``respawn`` / ``respawn_delay`` of the node action). Only the
nodes that can resume are restartable: the network, the EKF and the rotor bridge. The replay and eval
nodes of an evaluation never are (the report would mix two runs), and RViz is not supervised (closing
its window stops nothing).

:func:`decide` and :class:`Supervision` are plain Python, tested without ``launch``.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass
from typing import Any, Literal

from velobins_ros import CANNOT_START

Decision = Literal["ignore", "finished", "respawn", "stop"]
"""What a node's exit means: nothing (launch shutting down), its expected end, a restart, or the end
of the launch with a non-zero status."""


class StackStopped(RuntimeError):
    """Raised from a node's ``on_exit`` handler to end the launch with a non-zero status (one-line message)."""


@dataclass(frozen=True)
class Supervision:
    """The ``respawn`` / ``respawn_delay`` launch arguments.

    Attributes:
        respawn: restart a restartable node that dies instead of stopping the launch.
        respawn_delay: seconds between the death and the restart (launch's ``respawn_delay``).
    """

    respawn: bool = False
    respawn_delay: float = 1.0

    @classmethod
    def from_launch(cls, respawn: str, respawn_delay: str) -> Supervision:
        """Parse the argument texts; ``ValueError`` (one line naming the argument) if one is not valid."""
        flag = respawn.strip().lower()
        if flag not in ("true", "false", "1", "0"):
            raise ValueError(f"respawn:={respawn}: expected true or false")
        try:
            delay = float(respawn_delay)
        except ValueError:
            delay = math.nan
        if not (math.isfinite(delay) and delay >= 0.0):
            raise ValueError(f"respawn_delay:={respawn_delay}: expected a number of seconds >= 0")
        return cls(flag in ("true", "1"), delay)


def describe_exit(returncode: int) -> str:
    """``exit status 1`` or, for a process ended by a signal (negative code), ``killed by SIGKILL``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def decide(returncode: int, *, shutting_down: bool, respawn: bool, may_finish: bool) -> Decision:
    """What the exit of a supervised node means (the table of the module docstring).

    Args:
        returncode: the process's exit status (negative: killed by that signal).
        shutting_down: the launch is already stopping (every node is being told to exit).
        respawn: the node is restartable and ``respawn:=true``.
        may_finish: status 0 is this node's expected end (replay, eval).
    """
    if shutting_down:
        return "ignore"
    if returncode == CANNOT_START:
        return "stop"
    if returncode == 0 and may_finish:
        return "finished"
    return "respawn" if respawn else "stop"


def stop_reason(name: str, returncode: int, restartable: bool) -> str:
    """The one line that ends the launch when ``name`` exited with ``returncode``."""
    if returncode == CANNOT_START:
        return f"{name} cannot start ({describe_exit(returncode)}, reason in its FATAL line above): stopping the launch"
    hint = "; respawn:=true restarts it instead" if restartable else ""
    return f"{name} died ({describe_exit(returncode)}): stopping the launch{hint}"


def supervised(
    name: str, supervision: Supervision, restartable: bool = True, on_finish: list[Any] | None = None
) -> dict[str, Any]:
    """Keyword arguments for a ``launch_ros`` ``Node``: its respawn settings and its ``on_exit`` handler.

    Args:
        name: the node's name, as the log line says it.
        supervision: the launch's ``respawn`` settings.
        restartable: whether ``respawn:=true`` may restart this node.
        on_finish: actions for an exit with status 0 (the node's expected end, e.g. a ``Shutdown``
            event); None: status 0 is a death like any other.
    """
    respawn = supervision.respawn and restartable

    def on_exit(event: Any, context: Any) -> list[Any] | None:  # launch.events.process.ProcessExited
        decision = decide(
            event.returncode, shutting_down=context.is_shutdown, respawn=respawn, may_finish=on_finish is not None
        )
        if decision == "stop":
            raise StackStopped(stop_reason(name, event.returncode, restartable))
        if decision == "finished":
            return on_finish
        if decision == "respawn":
            from launch.actions import LogInfo

            delay = supervision.respawn_delay
            return [LogInfo(msg=f"{name} died ({describe_exit(event.returncode)}): restarting it in {delay:g} s")]
        return None

    return {"respawn": respawn, "respawn_delay": supervision.respawn_delay, "on_exit": on_exit}
