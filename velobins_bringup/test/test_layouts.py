"""Every topic a viewer layout or a recipe names exists in the graph, with the type it expects.

The graph is read from the code, not written down again: each node module's
``create_publisher(Type, cfg.<field>, ...)`` / ``create_subscription(Type, cfg.<field>, ...)`` calls
give the message type of each configured topic, and the node's config dataclass the topic's default
name. The layouts (rviz/velobins.rviz, foxglove/velobins.json) and the recipes
(config/recipes/robot_localization.yaml, record_flight.sh) are then checked against it. Topics that
come from outside the graph (the autopilot's IMU with orientation for robot_localization) are listed
in :data:`EXTERNAL` with the reason.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from velobins_bringup.layouts import FOXGLOVE_TOPICS, SCRIPT_PREFIX, foxglove_layout, rviz_config

ROOT = Path(__file__).resolve().parents[2]
BRINGUP = ROOT / "velobins_bringup"
NODES = {
    "velobins_net/velobins_net/node.py": ("velobins_net.node", "NetNodeConfig"),
    "velobins_ekf/velobins_ekf/node.py": ("velobins_ekf.node", "EkfNodeConfig"),
    "velobins_eval/velobins_eval/eval_node.py": ("velobins_eval.eval_node", "EvalNodeConfig"),
    "velobins_bridges/velobins_bridges/imu_node.py": ("velobins_bridges.imu", "ImuBridgeConfig"),
    "velobins_bridges/velobins_bridges/odom_out_node.py": ("velobins_bridges.odom_out", "OdomOutConfig"),
}
GLOBAL = {"/tf_static": "tf2_msgs/msg/TFMessage"}
"""Topics the nodes use through velobins_ros (the IMU frame's static transforms; /diagnostics is read
from velobins_ros.health below)."""
EXTERNAL = {
    "mavros/imu/data": "robot_localization's attitude source: the autopilot's IMU with orientation (mavros)",
}
RVIZ_TYPES = {
    "rviz_default_plugins/Path": "nav_msgs/msg/Path",
    "rviz_default_plugins/Odometry": "nav_msgs/msg/Odometry",
}
RL_TYPES = {
    "twist": "geometry_msgs/msg/TwistWithCovarianceStamped",
    "imu": "sensor_msgs/msg/Imu",
    "odom": "nav_msgs/msg/Odometry",
}


def _imported_types(tree: ast.Module) -> dict[str, str]:
    """Local name -> ROS type name of every ``from <pkg>.msg import X [as Y]``."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith(".msg"):
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module.split('.')[0]}/msg/{alias.name}"
    return out


def graph() -> dict[str, set[str]]:
    """Relative topic (or global one) -> the message types the nodes publish or subscribe on it."""
    import dataclasses
    import importlib

    out: dict[str, set[str]] = {}
    for rel, (module, cls) in NODES.items():
        tree = ast.parse((ROOT / rel).read_text())
        types = _imported_types(tree)
        config = getattr(importlib.import_module(module), cls)()
        fields = {f.name for f in dataclasses.fields(config)}
        for call in ast.walk(tree):
            if not (
                isinstance(call, ast.Call)
                and getattr(call.func, "attr", "") in ("create_publisher", "create_subscription")
            ):
                continue
            kind, where = call.args[0], call.args[1]
            if not (isinstance(kind, ast.Name) and kind.id in types):
                continue
            if isinstance(where, ast.Constant) and isinstance(where.value, str):  # "/tf"
                out.setdefault(where.value, set()).add(types[kind.id])
            elif isinstance(where, ast.Attribute) and where.attr in fields:
                if where.attr == "output_topic" and cls == "OdomOutConfig":
                    continue  # the autopilot's side
                out.setdefault(getattr(config, where.attr), set()).add(types[kind.id])
    from velobins_ros.health import DIAGNOSTICS_TOPIC

    for topic, kind in {**GLOBAL, DIAGNOSTICS_TOPIC: "diagnostic_msgs/msg/DiagnosticArray"}.items():
        out.setdefault(topic, set()).add(kind)
    return out


def check(topic: str, kind: str | None, namespace: str = "") -> None:
    g = graph()
    rel = topic if topic in g else topic.removeprefix(namespace).lstrip("/")
    assert rel in g, f"{topic}: no node of the graph publishes or subscribes it (graph: {sorted(g)})"
    if kind is not None:
        assert kind in g[rel], f"{topic}: the graph has {sorted(g[rel])}, the layout expects {kind}"


def test_the_graph_is_read_from_the_nodes() -> None:
    g = graph()
    assert g["velobins/velocity"] == {"velobins_msgs/msg/VelocityEstimate"}
    assert g["velobins/twist"] == {"geometry_msgs/msg/TwistWithCovarianceStamped"}
    assert g["velobins/odometry"] == {"nav_msgs/msg/Odometry"} and g["velobins/path"] == {"nav_msgs/msg/Path"}
    assert g["imu"] == {"sensor_msgs/msg/Imu"} and g["ground_truth/path"] == {"nav_msgs/msg/Path"}
    assert g["/tf"] == {"tf2_msgs/msg/TFMessage"}  # the EKF's broadcaster


def test_rviz_topics_and_types() -> None:
    doc = yaml.safe_load((BRINGUP / "rviz" / "velobins.rviz").read_text())
    displays = [d for d in doc["Visualization Manager"]["Displays"] if "Topic" in d]
    assert displays
    for display in displays:
        check(display["Topic"]["Value"], RVIZ_TYPES[display["Class"]])


def test_rviz_config_per_namespace() -> None:
    text = rviz_config((BRINGUP / "rviz" / "velobins.rviz").read_text(), "/drone1", "drone1/")
    doc = yaml.safe_load(text)
    topics = [d["Topic"]["Value"] for d in doc["Visualization Manager"]["Displays"] if "Topic" in d]
    assert topics and all(t.startswith("/drone1/") for t in topics), topics
    for t in topics:
        check(t, None, "/drone1")
    assert doc["Visualization Manager"]["Global Options"]["Fixed Frame"] == "drone1/odom"
    assert doc["Visualization Manager"]["Views"]["Current"]["Target Frame"] == "drone1/odom"


@pytest.mark.parametrize(("namespace", "prefix"), [("", ""), ("/drone1", "drone1/")])
def test_foxglove_layout_topics(namespace: str, prefix: str) -> None:
    layout = foxglove_layout(namespace, prefix)
    panels = layout["configById"]
    for topic in panels["3D!velobins"]["topics"]:
        check(topic, None, namespace)
    for panel in ("DiagnosticSummary!velobins", "DiagnosticStatusPanel!velobins"):
        check(panels[panel]["topicToRender"], "diagnostic_msgs/msg/DiagnosticArray")
    assert panels["3D!velobins"]["followTf"] == prefix + "base_link"
    (script,) = layout["userNodes"].values()
    inputs = re.findall(r'export const inputs = \["([^"]+)"\]', script["sourceCode"])
    (output,) = re.findall(r'export const output = "([^"]+)"', script["sourceCode"])
    assert inputs == [f"{namespace}/{FOXGLOVE_TOPICS['velocity']}"]
    check(inputs[0], "velobins_msgs/msg/VelocityEstimate", namespace)
    assert output.startswith(SCRIPT_PREFIX + "/")  # Foxglove's rule for a script's output
    plotted = {p["value"].split(".")[0] for k, v in panels.items() if k.startswith("Plot!") for p in v["paths"]}
    assert plotted == {output}  # the plots show the script's ±2σ band


def test_shipped_foxglove_layout_is_the_generated_one() -> None:
    shipped = json.loads((BRINGUP / "foxglove" / "velobins.json").read_text())
    assert shipped == foxglove_layout(), (
        "run: python -m velobins_bringup.layouts foxglove -o velobins_bringup/foxglove/velobins.json --overwrite"
    )


def test_robot_localization_recipe() -> None:
    doc = yaml.safe_load((BRINGUP / "config" / "recipes" / "robot_localization.yaml").read_text())
    params = doc["/**/ekf_filter_node"]["ros__parameters"]
    assert params["publish_tf"] is False  # velobins_ekf broadcasts odom -> base_link
    sensors = [k for k in params if re.fullmatch(r"(twist|imu|odom|pose)\d+", k)]
    assert sensors
    for key in sensors:
        topic = params[key]
        if topic in EXTERNAL:
            continue
        check(topic, RL_TYPES[re.sub(r"\d+$", "", key)])
    fused = [i for i, on in enumerate(params["twist0_config"]) if on]
    assert fused == [6, 7, 8]  # vx, vy, vz: what the network measures


def test_record_recipe_topics() -> None:
    text = (BRINGUP / "config" / "recipes" / "record_flight.sh").read_text()
    command = text[text.index("ros2 bag record") :]
    relative = re.findall(r'"\$ns/([\w/]+)"', command)
    absolute = re.findall(r"^\s+(/[\w/]+)", command, flags=re.M)
    assert relative and absolute
    for topic in relative + absolute:
        check(topic, None)
