"""Run the launch files for real in tests, as ``ros2 launch`` does, and watch what they do.

The PyPI ROS wheels have no ``launch`` / ``launch_ros``; the unmodified Jazzy packages are vendored
outside the project (``<repo>/../shared/vendor/ros2_launch_jazzy``, or ``$VELOBINS_LAUNCH_VENDOR``).
:func:`launch_vendor` finds them; tests that need them skip, naming the folder, where it is absent.

:class:`LaunchRun` starts this file as a script in a child process (its own session, so a failed test
can still end every node it started): the script includes one launch file with its arguments in a
``LaunchService`` and exits with the service's status, exactly what ``ros2 launch`` returns. The test
reads the launch's own output: ``process started with pid [N]`` lines give the node pids, node log
lines say when a node is ready, and waits are on those lines with generous timeouts, never on sleeps.

:class:`Vehicle` is the autopilot side: it publishes a simulated flight's IMU and rotor speeds in
real time (stamped with the wall clock, looped) and records the odometry that comes back.
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
from typing import Any

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


class Vehicle:
    """The autopilot side in this process: publishes ``flight`` (IMU + rotor speeds, wall-clock stamps, looped)
    under ``namespace`` and records the arrival time and frames of each odometry message.

    Args:
        domain_id: ROS domain of the launch under test.
        flight: a :class:`velobins_data.flight.Flight` (e.g. from the simulator).
        namespace: the launch's namespace (topics are relative there).
        imu_frame: ``header.frame_id`` of the IMU messages (mavros: ``base_link`` on every vehicle).
        imu_topic: where the IMU goes (``mavros/imu/data_raw`` for a launch with the IMU bridge).
    """

    def __init__(
        self, domain_id: int, flight: Any, namespace: str = "", imu_frame: str = "base_link", imu_topic: str = "imu"
    ) -> None:
        import rclpy
        from nav_msgs.msg import Odometry
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from rclpy.signals import SignalHandlerOptions
        from sensor_msgs.msg import Imu

        from velobins_data.bag import rotor_kind_code
        from velobins_msgs.msg import RotorSpeeds

        self.flight, self.imu_frame = flight, imu_frame
        self.kind = rotor_kind_code(flight.rotor_kind)
        self.ctx = Context()
        rclpy.init(args=[], context=self.ctx, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("vehicle", namespace=namespace or "/", context=self.ctx)
        self.imu_pub = self.node.create_publisher(Imu, imu_topic, qos_profile_sensor_data)
        self.rotor_pub = self.node.create_publisher(RotorSpeeds, "rotor_speeds", qos_profile_sensor_data)
        self.Imu, self.RotorSpeeds = Imu, RotorSpeeds
        self.odometry: list[tuple[float, str, str]] = []
        """(monotonic arrival time, header.frame_id, child_frame_id) of each odometry message."""
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(Odometry, "velobins/odometry", self._on_odometry, reliable)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._spin, self._publish)]
        for t in self._threads:
            t.start()

    def _on_odometry(self, msg: Any) -> None:
        self.odometry.append((time.monotonic(), msg.header.frame_id, msg.child_frame_id))

    def _spin(self) -> None:
        while not self._stop.is_set() and self.ctx.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def _publish(self) -> None:
        f = self.flight
        period = float(f.t[1] - f.t[0])
        imu, rot = self.Imu(), self.RotorSpeeds()
        imu.header.frame_id = self.imu_frame
        rot.kind = self.kind
        start, n = time.monotonic(), 0
        while not self._stop.is_set():
            k = n % len(f.t)
            sec, nsec = divmod(time.time_ns(), 1_000_000_000)
            for msg in (imu, rot):
                msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nsec
            a, w = imu.linear_acceleration, imu.angular_velocity
            a.x, a.y, a.z = (float(x) for x in f.acc[k])
            w.x, w.y, w.z = (float(x) for x in f.gyro[k])
            rot.speeds = [float(x) for x in f.rotor[k]]
            self.imu_pub.publish(imu)
            self.rotor_pub.publish(rot)
            n += 1
            self._stop.wait(max(0.0, start + n * period - time.monotonic()))

    def wait_for_odometry(self, timeout: float) -> float:
        """Monotonic arrival time of the first odometry message (AssertionError after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while not self.odometry:
            assert time.monotonic() < deadline, f"no odometry within {timeout:g} s"
            time.sleep(0.02)
        return self.odometry[0][0]

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()


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
