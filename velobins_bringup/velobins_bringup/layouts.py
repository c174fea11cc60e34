"""Viewer layouts for one vehicle: the RViz config and the Foxglove layout of a namespace.

Topic names in a viewer's file are absolute and frame names carry no namespace, so a layout made
for the root namespace shows nothing of ``/drone1`` (``frame_prefix:=drone1/``). Both layouts are
therefore made for a ``(namespace, frame_prefix)`` pair from one description each:

* :func:`rviz_config` rewrites the shipped ``rviz/velobins.rviz`` (root namespace): every display's
  absolute topic goes under the namespace and the fixed, reference and target frames get the
  prefix. ``drone.launch.py rviz:=true namespace:=/drone1`` starts RViz with it (:func:`rviz_file`).
* :func:`foxglove_layout` builds the Foxglove layout: a 3-D panel with the path, the odometry and
  TF (following the body), the body velocity of each axis with its ±2σ band (a Foxglove user
  script computes the band from the estimate's covariance), and the diagnostics. The shipped
  ``foxglove/velobins.json`` is the root namespace's (a test keeps it equal to this function).

    python -m velobins_bringup.layouts foxglove --namespace /drone1 --frame-prefix drone1/ -o drone1.json
    python -m velobins_bringup.layouts rviz --namespace /drone1 --frame-prefix drone1/ -o drone1.rviz

:data:`FOXGLOVE_TOPICS` lists what the Foxglove layout subscribes to (relative names);
velobins_bringup/test/test_layouts.py checks every topic of every layout and recipe against the
nodes' configured topics and types.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

GLOBAL_TOPICS = ("/tf", "/tf_static", "/diagnostics", "/clock")
"""Topics that stay global in every namespace (ROS 2 convention; see docs/ros_interface.md)."""
RVIZ_FRAME_KEYS = ("Fixed Frame", "Reference Frame", "Target Frame")

FOXGLOVE_TOPICS = {
    "path": "velobins/path",
    "odometry": "velobins/odometry",
    "ground_truth_path": "ground_truth/path",
    "velocity": "velobins/velocity",
}
"""The VeloBins topics the Foxglove layout shows (relative; the namespace is prepended)."""
SCRIPT_PREFIX = "/studio_script"
"""Foxglove publishes a user script's output under this prefix."""

_VELOCITY_SCRIPT = """\
// VeloBins: the network's body velocity with a ±2σ band from its covariance (velobins_msgs/VelocityEstimate:
// velocity in the body frame, covariance 3x3 row-major: the variances are entries 0, 4 and 8).
import { Input } from "./types";

export const inputs = ["%(topic)s"];
export const output = "%(output)s";

type Band = {
  vx: number; vx_lo: number; vx_hi: number;
  vy: number; vy_lo: number; vy_hi: number;
  vz: number; vz_lo: number; vz_hi: number;
};

export default function script(event: Input<"%(topic)s">): Band {
  const v = event.message.velocity;
  const c = event.message.covariance;
  const sx = 2 * Math.sqrt(c[0]), sy = 2 * Math.sqrt(c[4]), sz = 2 * Math.sqrt(c[8]);
  return {
    vx: v.x, vx_lo: v.x - sx, vx_hi: v.x + sx,
    vy: v.y, vy_lo: v.y - sy, vy_hi: v.y + sy,
    vz: v.z, vz_lo: v.z - sz, vz_hi: v.z + sz,
  };
}
"""


def absolute(namespace: str, topic: str) -> str:
    """``topic`` (relative, or absolute from the root namespace's files) under ``namespace``."""
    if topic in GLOBAL_TOPICS:
        return topic
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{ns}/{topic.lstrip('/')}"


def _rewrite(node: Any, namespace: str, frame_prefix: str) -> Any:
    if isinstance(node, list):
        return [_rewrite(x, namespace, frame_prefix) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "Topic" and isinstance(value, dict) and isinstance(value.get("Value"), str):
            value = {**value, "Value": absolute(namespace, value["Value"])}
        elif key in RVIZ_FRAME_KEYS and isinstance(value, str):
            value = frame_prefix + value
        out[key] = _rewrite(value, namespace, frame_prefix)
    return out


def rviz_config(template: str, namespace: str, frame_prefix: str) -> str:
    """The RViz config ``template`` (for the root namespace) made for ``namespace`` and ``frame_prefix``."""
    doc = yaml.safe_load(template)
    return yaml.safe_dump(_rewrite(doc, namespace, frame_prefix), sort_keys=False, allow_unicode=True)


def rviz_file(share: str | Path, namespace: str, frame_prefix: str) -> str:
    """Path of the RViz config for a vehicle: the shipped one for the root namespace, else one written
    for it into the temporary directory (``velobins_rviz/<namespace>.rviz``)."""
    shipped = Path(share) / "rviz" / "velobins.rviz"
    if not namespace.strip("/") and not frame_prefix:
        return str(shipped)
    folder = Path(tempfile.gettempdir()) / "velobins_rviz"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{namespace.strip('/').replace('/', '_') or 'root'}.rviz"
    path.write_text(rviz_config(shipped.read_text(encoding="utf-8"), namespace, frame_prefix), encoding="utf-8")
    return str(path)


def _plot(title: str, band: str, axis: str) -> dict[str, Any]:
    def path(field: str, label: str, color: str) -> dict[str, Any]:
        value = f"{band}.{field}"
        return {"value": value, "enabled": True, "timestampMethod": "receiveTime", "label": label, "color": color}

    return {
        "title": title,
        "paths": [
            path(f"v{axis}", f"v{axis} [m/s]", "#1976d2"),
            path(f"v{axis}_lo", "−2σ", "#90caf9"),
            path(f"v{axis}_hi", "+2σ", "#90caf9"),
        ],
        "showXAxisLabels": True,
        "showYAxisLabels": True,
        "showLegend": True,
        "legendDisplay": "floating",
        "isSynced": True,
        "xAxisVal": "timestamp",
    }


def foxglove_layout(namespace: str = "", frame_prefix: str = "") -> dict[str, Any]:
    """The Foxglove layout of one vehicle (module docstring); JSON-serialisable."""
    topic = {name: absolute(namespace, rel) for name, rel in FOXGLOVE_TOPICS.items()}
    band = f"{SCRIPT_PREFIX}{absolute(namespace, 'velobins/velocity_2sigma')}"
    odom, base = frame_prefix + "odom", frame_prefix + "base_link"
    config = {
        "3D!velobins": {
            "followMode": "follow-position",
            "followTf": base,
            "scene": {"transforms": {"showLabel": True, "axisScale": 0.5}},
            "transforms": {f"frame:{odom}": {"visible": True}, f"frame:{base}": {"visible": True}},
            "topics": {
                topic["path"]: {"visible": True, "lineWidth": 0.03, "gradient": ["#1976d2ff", "#1976d2ff"]},
                topic["ground_truth_path"]: {
                    "visible": True,
                    "lineWidth": 0.03,
                    "gradient": ["#2e7d32ff", "#2e7d32ff"],
                },
                topic["odometry"]: {"visible": True, "type": "arrow", "showCovariance": True},
            },
            "layers": {"grid": {"layerId": "foxglove.Grid", "visible": True, "frameId": odom, "size": 20}},
            "cameraState": {"distance": 8, "phi": 55, "thetaOffset": 45, "perspective": True},
        },
        "Plot!vx": _plot("body velocity x (±2σ)", band, "x"),
        "Plot!vy": _plot("body velocity y (±2σ)", band, "y"),
        "Plot!vz": _plot("body velocity z (±2σ)", band, "z"),
        "DiagnosticSummary!velobins": {"topicToRender": "/diagnostics", "minLevel": 0, "sortByLevel": True},
        "DiagnosticStatusPanel!velobins": {"topicToRender": "/diagnostics", "selectedHardwareId": base},
    }
    script = _VELOCITY_SCRIPT % {"topic": topic["velocity"], "output": band}
    return {
        "configById": config,
        "globalVariables": {},
        "userNodes": {"velobins-velocity-2sigma": {"name": "velobins velocity ±2σ", "sourceCode": script}},
        "playbackConfig": {"speed": 1},
        "layout": {
            "direction": "row",
            "first": "3D!velobins",
            "second": {
                "direction": "column",
                "first": {
                    "direction": "column",
                    "first": "Plot!vx",
                    "second": {"direction": "column", "first": "Plot!vy", "second": "Plot!vz"},
                    "splitPercentage": 33,
                },
                "second": {
                    "direction": "row",
                    "first": "DiagnosticSummary!velobins",
                    "second": "DiagnosticStatusPanel!velobins",
                },
                "splitPercentage": 70,
            },
            "splitPercentage": 55,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m velobins_bringup.layouts {rviz,foxglove}``: write a layout for a namespace."""
    parser = argparse.ArgumentParser(prog="python -m velobins_bringup.layouts", description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("rviz", "foxglove"))
    parser.add_argument("--namespace", default="", help="the vehicle's namespace, e.g. /drone1")
    parser.add_argument("--frame-prefix", default="", help="its frame prefix, e.g. drone1/")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    args = parser.parse_args(argv)
    from velobins_common.errors import UserError, one_line
    from velobins_common.output_files import check_output_file, write_output_file

    try:  # an existing file only with --overwrite; a pipe or /dev/null written directly (issue 24)
        target = None if args.output is None else check_output_file(args.output, args.overwrite, "--output")
    except UserError as exc:
        print(one_line(exc), file=sys.stderr)
        return 2
    if args.kind == "foxglove":
        text = json.dumps(foxglove_layout(args.namespace, args.frame_prefix), indent=2, ensure_ascii=False) + "\n"
    else:
        shipped = Path(__file__).resolve().parents[1] / "rviz" / "velobins.rviz"
        if not shipped.is_file():
            from velobins_bringup.launch_args import share_dir

            shipped = Path(share_dir()) / "rviz" / "velobins.rviz"
        text = rviz_config(shipped.read_text(encoding="utf-8"), args.namespace, args.frame_prefix)
    if target is None:
        sys.stdout.write(text)
        return 0
    try:
        write_output_file(target, text)
    except UserError as exc:  # a full disk: one line naming the file
        print(one_line(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
