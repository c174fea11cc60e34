"""Build-time check of the VeloBins image (run by docker/Dockerfile after colcon build).

Fails the build, naming the cause, where the image would fail at run time:
* the pinned packages are not the ones Python imports (the venv must win over apt's numpy & co.);
* ROS's compiled message support (built against apt's numpy) cannot convert messages with array
  fields under the venv's numpy: a sensor_msgs/Imu and both VeloBins messages are serialised and
  read back through rclpy, which runs that C code;
* a node module or the command line does not import;
* an installed entry point does not run with the venv's python.
Runs outside Docker too (in the bootstrap venv), where the entry-point check is skipped.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def check_pins() -> None:
    wanted = pins(HERE / "requirements.txt")
    torch_pin = re.search(r'"torch==([^"]+)"', (HERE / "Dockerfile").read_text())
    if torch_pin:
        wanted["torch"] = torch_pin.group(1)
    wrong = {}
    for name, version in wanted.items():
        got = metadata.version(name).split("+")[0]  # torch's CPU wheel is 2.x.y+cpu
        if got != version:
            wrong[name] = (got, version)
    assert not wrong, f"installed != pinned: {wrong}"
    import numpy

    assert numpy.__version__ == wanted["numpy"], f"numpy {numpy.__version__} from {numpy.__file__} shadows the pin"


def check_messages() -> None:
    from geometry_msgs.msg import Quaternion
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Imu

    from velobins_msgs.msg import RotorSpeeds, VelocityEstimate

    imu = Imu(orientation=Quaternion(w=1.0))
    imu.angular_velocity_covariance[4] = 0.5
    imu.linear_acceleration.z = 9.81
    back = deserialize_message(serialize_message(imu), Imu)
    assert back.angular_velocity_covariance[4] == 0.5 and back.linear_acceleration.z == 9.81
    for msg_type in (RotorSpeeds, VelocityEstimate):
        msg = msg_type()
        assert deserialize_message(serialize_message(msg), msg_type) == msg, msg_type.__name__


def check_imports() -> None:
    """Every VeloBins executable's module (nodes, rotor bridge, the command line) imports."""
    scripts = metadata.entry_points(group="console_scripts")
    modules = sorted({ep.value.split(":")[0] for ep in scripts if ep.value.startswith("velobins")})
    assert len(modules) >= 4, f"VeloBins entry points not found (workspace not sourced?): {modules}"
    for module in modules:
        importlib.import_module(module)
    print(f"check_image: imported {', '.join(modules)}")


def check_entry_points() -> None:
    venv = os.environ.get("VIRTUAL_ENV")
    install = Path(os.environ.get("VELOBINS_INSTALL", "/ws/install"))
    if not venv or not install.is_dir():
        print("check_image: no VIRTUAL_ENV or /ws/install: entry-point check skipped")
        return
    scripts = sorted(install.glob("velobins_*/lib/velobins_*/*"))
    assert scripts, f"no entry points under {install}"
    for script in scripts:
        first = script.read_text(errors="ignore").splitlines()[0]
        assert first.startswith(f"#!{venv}/bin/python"), f"{script} runs with {first!r}, not the venv"


def main() -> int:
    for check in (check_pins, check_messages, check_imports, check_entry_points):
        check()
        print(f"check_image: {check.__name__} ok")
    print(f"check_image: python {sys.version.split()[0]} at {sys.executable}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
