"""Run the launch files for real in tests, as ``ros2 launch`` does, and watch what they do.

The PyPI ROS wheels have no ``launch`` / ``launch_ros``; the unmodified Jazzy packages are vendored
outside the project (``<repo>/../shared/vendor/ros2_launch_jazzy``, or ``$VELOBINS_LAUNCH_VENDOR``).
:func:`launch_vendor` finds them; tests that need them skip, naming the folder, where it is absent.

:class:`LaunchRun` starts this file as a script in a child process (its own session, so a failed test
can still end every node it started): the script includes one launch file with its arguments in a
``LaunchService`` and exits with the service's status, exactly what ``ros2 launch`` returns. The test
reads the launch's own output: ``process started with pid [N]`` lines give the node pids, node log
lines say when a node is ready, and waits are on those lines with generous timeouts, never on sleeps.

:class:`vehicle_probe.Vehicle` is the autopilot side of these tests.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_DIR = ROOT / "velobins_bringup" / "launch"
VENDOR_ENV = "VELOBINS_LAUNCH_VENDOR"


def launch_vendor() -> Path | None:
    """The folder holding the Jazzy ``launch`` / ``launch_ros`` packages, or None where there is none."""
    folder = Path(os.environ.get(VENDOR_ENV) or ROOT.parent / "shared" / "vendor" / "ros2_launch_jazzy")
    return folder if (folder / "launch" / "__init__.py").is_file() and (folder / "launch_ros").is_dir() else None


def skip_reason() -> str:
    return (
        f"the ROS 2 launch system is not installed here (no launch/launch_ros at ${VENDOR_ENV} or "
        f"{ROOT.parent / 'shared' / 'vendor' / 'ros2_launch_jazzy'})"
    )


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie has ended: only its exit status is left)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


class LaunchRun:
    """One launch file running in a child process; its output collected line by line.

    Args:
        launch_file: file name in velobins_bringup/launch.
        args: launch arguments (``name:=value``).
        cwd: working directory of the launch (and of its nodes).
    """

    def __init__(self, launch_file: str, args: dict[str, str], cwd: Path) -> None:
        vendor = launch_vendor()
        assert vendor is not None, skip_reason()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(vendor), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("RCUTILS_COLORIZED_OUTPUT", "0")
        cmd = [sys.executable, __file__, str(LAUNCH_DIR / launch_file), *(f"{k}:={v}" for k, v in args.items())]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        self.lines: list[str] = []
        self.arrivals: list[float] = []
        """Monotonic time each line arrived here (the launch's and the nodes' own clocks are not used)."""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.arrivals.append(time.monotonic())
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 120.0, after: int = 0) -> tuple[int, re.Match[str]]:
        """(index, match) of the first output line from index ``after`` on that matches ``pattern``.

        Raises AssertionError (with the output) on timeout or when the launch ended without it.
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        i = after
        with self._changed:
            while True:
                while i < len(self.lines):
                    found = regex.search(self.lines[i])
                    if found:
                        return i, found
                    i += 1
                ended = not self._reader.is_alive()
                left = deadline - time.monotonic()
                if ended or left <= 0:
                    why = "the launch ended" if ended else f"{timeout:g} s passed"
                    raise AssertionError(f"{why} without a line matching {pattern!r}:\n" + "\n".join(self.lines))
                self._changed.wait(min(left, 1.0))

    def pids(self, executable: str) -> list[int]:
        """Pids of every process launch started for ``executable``, in order (a respawn adds one)."""
        regex = re.compile(rf"\[INFO\] \[{re.escape(executable)}-\d+\]: process started with pid \[(\d+)\]")
        return [int(m.group(1)) for line in self.lines if (m := regex.search(line))]

    def all_pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines if (m := re.search(r"process started with pid \[(\d+)\]", line))]

    def wait(self, timeout: float = 120.0) -> int:
        """The launch's exit status (AssertionError with the output if it is still running after ``timeout``)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the launch still runs after {timeout:g} s:\n{self.output}") from None
        self._reader.join(timeout=10.0)
        return code

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the launch and its nodes, as a terminal sends it to its foreground process group.

        Launch relies on that: on SIGINT it does not signal the nodes itself, and escalates to SIGTERM
        (with an ERROR line) when they are still running 5 s later.
        """
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)

    def close(self) -> None:
        """End the launch and everything it started, whatever state the test left it in."""
        if self.proc.poll() is None:
            self.interrupt()
        try:
            self.proc.wait(timeout=60.0)
        except subprocess.TimeoutExpired:
            pass
        for pid in self.all_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(timeout=10.0)


def _run(argv: list[str]) -> int:
    """``ros2 launch <file> name:=value ...``: include the file in a LaunchService and return its status."""
    from launch import LaunchDescription, LaunchService
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource

    path, *pairs = argv
    arguments = [tuple(p.split(":=", 1)) for p in pairs]
    service = LaunchService()
    service.include_launch_description(
        LaunchDescription([IncludeLaunchDescription(PythonLaunchDescriptionSource(path), launch_arguments=arguments)])
    )
    return service.run()


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1:]))
