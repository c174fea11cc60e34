"""Run the VeloBins node graph on a bag without ``ros2 launch``: four separate processes over DDS.

``launch``/``launch_ros`` are not installable from the ROS PyPI wheels, so the graph tests and the
demo start the same executables ``replay_eval.launch.py`` starts, with the same parameter files
(``config/velobins.yaml`` then ``config/evaluation.yaml``), via ``--ros-args --params-file``. Each
run gets its own ``ROS_DOMAIN_ID`` so concurrent runs on one machine do not hear each other.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .processes import stop_processes

NODES = (
    ("velobins_net", "velobins_net_node"),
    ("velobins_ekf", "velobins_ekf_node"),
    ("velobins_eval", "velobins_eval_node"),
    ("velobins_eval", "velobins_replay_node"),
)


NODE_STOP_GRACE_S = 30.0
"""Wall seconds the four nodes get, together, after SIGINT to log their summaries and exit before they are
terminated. Generous on purpose: four torch-loading nodes tearing down Fast DDS at once on a loaded 2-core
machine; a clean stop takes a few seconds."""


def config_files() -> list[Path]:
    """The parameter files replay_eval.launch.py loads, in order."""
    from ament_index_python.packages import get_package_share_directory

    share = Path(get_package_share_directory("velobins_bringup")) / "config"
    return [share / "velobins.yaml", share / "evaluation.yaml"]


@dataclass
class GraphRun:
    """Outcome of :func:`run_graph`."""

    report_dir: Path
    metrics: dict
    wall_s: float
    return_codes: dict[str, int | None]
    logs: dict[str, str]


def run_graph(
    bag: str | Path,
    model: str | Path,
    out_dir: str | Path,
    rate: float = 1.0,
    label: str = "velobins",
    flight: str = "flight",
    extra_params: dict[str, dict[str, object]] | None = None,
    timeout: float = 300.0,
    domain_id: int | None = None,
    namespace: str = "",
    params_files: list[str | Path] | None = None,
) -> GraphRun:
    """Replay ``bag`` through net + EKF + eval nodes; return the eval node's report.

    ``extra_params`` maps an executable name to additional ``-p name:=value`` overrides;
    ``params_files`` are overlays loaded after the shipped files (as ``params_file:=`` in a launch);
    ``namespace`` (e.g. ``/drone1``) puts all four nodes and their relative topics under it, as
    ``namespace:=`` does in the launch files, so several graphs can share one domain.
    """
    from velobins_ros import executable

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain_id if domain_id is not None else random.SystemRandom().randint(1, 100))
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["PYTHONUNBUFFERED"] = "1"
    params = {
        "velobins_net_node": {"model_path": str(model)},
        "velobins_eval_node": {"output_dir": str(out_dir), "label": label, "flight": flight},
        "velobins_replay_node": {"bag": str(bag), "rate": float(rate)},
    }
    for exe, values in (extra_params or {}).items():
        params.setdefault(exe, {}).update(values)
    files = [a for f in [*config_files(), *(params_files or [])] for a in ("--params-file", str(f))]
    remap = ["-r", f"__ns:={namespace}"] if namespace else []
    procs: dict[str, subprocess.Popen] = {}
    logs: dict[str, Path] = {}
    start = time.monotonic()
    try:
        for package, exe in NODES:
            cmd = [str(executable(package, exe)), "--ros-args", *remap, *files]
            for name, value in params.get(exe, {}).items():
                cmd += ["-p", f"{name}:={_ros_value(value)}"]
            logs[exe] = out_dir / f"{exe}.log"
            with logs[exe].open("w") as log:
                procs[exe] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
            if exe == "velobins_eval_node":
                time.sleep(0.5)  # subscribers up before the replay starts publishing
        procs["velobins_eval_node"].wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    finally:
        # As Ctrl-C and ros2 launch: SIGINT to all (each node logs its drop totals), one shared grace, then
        # SIGTERM and SIGKILL, so four nodes tear down Fast DDS together instead of 10 s each in turn.
        stop_processes(procs.values(), grace_s=NODE_STOP_GRACE_S)
    wall = time.monotonic() - start
    metrics_path = out_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    return GraphRun(
        report_dir=out_dir,
        metrics=metrics,
        wall_s=wall,
        return_codes={exe: p.returncode for exe, p in procs.items()},
        logs={exe: path.read_text(errors="replace") for exe, path in logs.items()},
    )


def _ros_value(value: object) -> str:
    """A Python value as a ``-p name:=value`` literal (strings quoted so '1' stays a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value) if value.replace(".", "", 1).isdigit() or not value else value
    return str(value)
