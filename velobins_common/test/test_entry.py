"""Node executables start through :mod:`velobins_common.entry`: a stop while the node is still importing is quiet.

The launch tests saw it (``test_launch_supervision``): a replay node stopped by the launch's SIGINT while its
first import was compiling ``.pyc`` files printed a ``KeyboardInterrupt`` traceback and exited −2. Here a real
interpreter is stopped during a real, slow import: deterministic, since SIGINT is sent once the module says it
is importing, not after a guessed delay.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from importlib.metadata import distributions
from importlib.util import find_spec
from pathlib import Path

import pytest

from velobins_common.entry import GROUP, NO_SUCH_NODE, STOPPED_BEFORE_START

SLOW_NODE = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).write_text("importing")
time.sleep(120)  # the heavy imports of a cold start

def main():
    print("node ran")
"""

QUICK_NODE = """
import sys

def main():
    print("node ran as", sys.argv[0].rsplit("/", 1)[-1])
"""


def _write_dist(root: Path, module: str, source: str, executable: str) -> None:
    """A module and an installed-distribution record naming it under :data:`GROUP`, as colcon installs ours."""
    (root / f"{module}.py").write_text(source)
    info = root / "fake_velobins_node-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-velobins-node\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{executable} = {module}:main\n")


def _start(root: Path, code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r}); {code}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupt_while_importing(proc: subprocess.Popen[str], marker: Path) -> tuple[int, str]:
    """SIGINT once ``marker`` says the import is under way; (exit status, stderr)."""
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow module never started importing"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_a_node_stopped_while_importing_exits_quietly_through_the_entry(tmp_path: Path) -> None:
    _write_dist(tmp_path, "slow_node", SLOW_NODE, "slow_node_exe")
    marker = tmp_path / "importing"
    code = "sys.argv[0] = '/install/lib/x/slow_node_exe'; from velobins_common.entry import main; main()"
    status, err = _interrupt_while_importing(_start(tmp_path, code, str(marker)), marker)
    assert status == STOPPED_BEFORE_START
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_without_the_entry_the_same_stop_prints_a_traceback(tmp_path: Path) -> None:
    """The control: what a node executable pointing straight at its module does (the old wiring)."""
    _write_dist(tmp_path, "slow_node", SLOW_NODE, "slow_node_exe")
    marker = tmp_path / "importing"
    status, err = _interrupt_while_importing(_start(tmp_path, "import slow_node", str(marker)), marker)
    assert status != 0
    assert "KeyboardInterrupt" in err


def test_the_entry_runs_the_node_registered_under_the_executable_name(tmp_path: Path) -> None:
    _write_dist(tmp_path, "quick_node", QUICK_NODE, "quick_node_exe")
    code = "sys.argv[0] = '/install/lib/x/quick_node_exe'; from velobins_common.entry import main; main()"
    out, err = _start(tmp_path, code).communicate(timeout=60)
    assert out.strip() == "node ran as quick_node_exe", err


def test_an_unregistered_executable_name_fails_in_one_line(tmp_path: Path) -> None:
    code = "sys.argv[0] = '/install/lib/x/no_such_node'; from velobins_common.entry import main; main()"
    proc = _start(tmp_path, code)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == NO_SUCH_NODE
    assert err.strip().splitlines() == [err.strip()] and "no_such_node" in err and "bootstrap" in err


def _installed_velobins() -> list:
    dists = [d for d in distributions() if (d.metadata["Name"] or "").replace("-", "_").startswith("velobins_")]
    if not dists:
        pytest.skip("the VeloBins workspace is not installed (scripts/bootstrap.sh)")
    return dists


def test_every_installed_node_executable_starts_through_the_entry() -> None:
    """Every console script but the ``velobins`` command is a node, goes through the entry, and names an
    importable node module under :data:`GROUP`."""
    nodes: dict[str, str] = {}
    for dist in _installed_velobins():
        registered = {ep.name: ep.value for ep in dist.entry_points if ep.group == GROUP}
        for ep in dist.entry_points:
            if ep.group != "console_scripts" or ep.name == "velobins":
                continue
            assert ep.value == "velobins_common.entry:main", f"{ep.name} bypasses the entry: {ep.value}"
            assert ep.name in registered, f"{ep.name} has no {GROUP} entry"
            module = registered[ep.name].split(":")[0]
            assert find_spec(module) is not None, f"{ep.name} -> {module}: no such module"
            nodes[ep.name] = module
    assert {"velobins_ekf_node", "velobins_net_node", "velobins_replay_node"} <= set(nodes)
