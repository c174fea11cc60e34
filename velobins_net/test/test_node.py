"""The network node refuses a missing or unreadable checkpoint with one clear line and exit status 2
(``velobins_ros.CANNOT_START``: a user error, which the launch files never respawn)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["missing", "garbage", "unset"])
def test_bad_checkpoint_fails_cleanly(tmp_path: Path, ros_domain: int, kind: str) -> None:
    from velobins_ros import executable

    path = tmp_path / "model.pt"
    if kind == "garbage":
        path.write_bytes(b"not a checkpoint")
    model = "" if kind == "unset" else str(path)
    cmd = [str(executable("velobins_net", "velobins_net_node")), "--ros-args", "-p", f"model_path:={model!r}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "cannot start" in out
    assert "Traceback" not in out
    assert ("model_path" in out) if kind == "unset" else (str(path) in out)
