"""What a supervised node's exit means (velobins_bringup.supervision), without launch.

The same handler under the real launch system, with real faults: test_launch_supervision.py.
"""

from __future__ import annotations

import signal

import pytest

from velobins_bringup.supervision import Supervision, decide, describe_exit, stop_reason, supervised
from velobins_ros import CANNOT_START


@pytest.mark.parametrize(
    ("returncode", "shutting_down", "respawn", "may_finish", "expected"),
    [
        (-signal.SIGKILL, False, False, False, "stop"),
        (-signal.SIGKILL, False, True, False, "respawn"),
        (1, False, False, False, "stop"),  # a crash (traceback)
        (1, False, True, False, "respawn"),
        (0, False, False, False, "stop"),  # network / EKF never end by themselves
        (0, False, True, False, "respawn"),
        (CANNOT_START, False, False, False, "stop"),
        (CANNOT_START, False, True, False, "stop"),  # a restart would fail the same way
        (CANNOT_START, False, False, True, "stop"),
        (0, False, False, True, "finished"),  # replay / eval at their end
        (1, False, False, True, "stop"),
        (-signal.SIGKILL, True, False, False, "ignore"),  # launch is stopping everything anyway
        (CANNOT_START, True, True, True, "ignore"),
    ],
)
def test_decide(returncode: int, shutting_down: bool, respawn: bool, may_finish: bool, expected: str) -> None:
    got = decide(returncode, shutting_down=shutting_down, respawn=respawn, may_finish=may_finish)
    assert got == expected


def test_exits_are_described_for_people() -> None:
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(1) == "exit status 1"
    assert describe_exit(-200) == "killed by signal 200"
    assert stop_reason("velobins_ekf", -9, True) == (
        "velobins_ekf died (killed by SIGKILL): stopping the launch; respawn:=true restarts it instead"
    )
    assert stop_reason("velobins_eval", 1, False) == "velobins_eval died (exit status 1): stopping the launch"
    assert stop_reason("velobins_net", CANNOT_START, True).startswith("velobins_net cannot start (exit status 2")


def test_launch_arguments_parse_or_say_which_is_wrong() -> None:
    assert Supervision.from_launch("false", "1.0") == Supervision(False, 1.0)
    assert Supervision.from_launch("True", "0") == Supervision(True, 0.0)
    assert Supervision.from_launch("1", "2.5") == Supervision(True, 2.5)
    for respawn, delay, message in (
        ("yes", "1", "respawn:=yes: expected true or false"),
        ("true", "soon", "respawn_delay:=soon: expected a number of seconds >= 0"),
        ("true", "-1", "respawn_delay:=-1: expected"),
        ("true", "nan", "respawn_delay:=nan: expected"),
    ):
        with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
            Supervision.from_launch(respawn, delay)


def test_only_restartable_nodes_get_launchs_respawn() -> None:
    on = Supervision(True, 0.5)
    assert supervised("velobins_ekf", on)["respawn"] is True
    assert supervised("velobins_ekf", on)["respawn_delay"] == 0.5
    assert supervised("velobins_replay", on, restartable=False)["respawn"] is False
    assert supervised("velobins_ekf", Supervision())["respawn"] is False
    assert callable(supervised("velobins_ekf", on)["on_exit"])
