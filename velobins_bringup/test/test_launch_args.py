"""Launch arguments reach the nodes with the type the nodes declare (no YAML guessing).

``launch``/``launch_ros`` are not installable here, so the launch files are checked in two parts
that need neither: the argument table (``velobins_bringup.launch_args``) against the nodes'
config dataclasses and the launch files' source, and the real eval node started with a parameter
file written the way ``ParameterValue(..., value_type=str)`` makes launch_ros write it (a quoted
string), against the untyped ``-p flight:=001`` that rcl reads as the integer 1.
"""

from __future__ import annotations

import ast
import subprocess
import time
import typing
from pathlib import Path

import pytest
import yaml

from velobins_bringup import launch_args as la

LAUNCH_DIR = Path(__file__).resolve().parents[1] / "launch"


def _node_fields() -> dict[str, dict[str, type]]:
    from velobins_ekf.node import EkfNodeConfig
    from velobins_eval.eval_node import EvalNodeConfig
    from velobins_eval.replay_node import ReplayConfig
    from velobins_net.node import NetNodeConfig

    configs = {la.NET: NetNodeConfig, la.EKF: EkfNodeConfig, la.REPLAY: ReplayConfig, la.EVAL: EvalNodeConfig}
    return {node: typing.get_type_hints(cls) for node, cls in configs.items()}


@pytest.mark.parametrize("table", [la.DRONE_ARGS, la.REPLAY_ARGS], ids=["drone", "replay_eval"])
def test_arguments_match_node_parameter_types(table: tuple[la.LaunchArg, ...]) -> None:
    fields = _node_fields()
    names = [a.name for a in table]
    assert len(names) == len(set(names)), names
    assert {"namespace", "params_file", "log_level", "model_path"} <= set(names)
    for a in table:
        assert a.type in (str, float, bool) and a.description, a
        for node, param in a.sets:
            assert param in fields[node], f"{a.name} sets unknown parameter {node}.{param}"
            assert fields[node][param] is a.type, f"{a.name}: {a.type} but {node}.{param} is {fields[node][param]}"


@pytest.mark.parametrize("name", ["drone.launch.py", "replay_eval.launch.py"])
def test_launch_files_pass_no_untyped_argument(name: str) -> None:
    """A LaunchConfiguration placed directly in a parameters dict would be YAML-parsed by launch."""
    tree = ast.parse((LAUNCH_DIR / name).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for value in node.values:
                bare = isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("arg", "LaunchConfiguration")
                assert not bare, f"{name}:{value.lineno}: untyped launch argument in a parameters dict"
    source = (LAUNCH_DIR / name).read_text()
    assert "declarations(" in source and "node_parameters(" in source and "namespace=" in source


def _start_eval_node(tmp_path: Path, extra: list[str]) -> subprocess.Popen:
    from velobins_eval.graph import config_files
    from velobins_ros import executable

    files = [a for f in config_files() for a in ("--params-file", str(f))]
    cmd = [str(executable("velobins_eval", "velobins_eval_node")), "--ros-args", *files, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)


@pytest.mark.ros
def test_typed_string_arguments_reach_the_node(tmp_path: Path, ros_domain: int) -> None:
    # What launch_ros writes for ParameterValue(LaunchConfiguration("flight"), value_type=str).
    typed = {"flight": "001", "output_dir": str(tmp_path / "2024-05-01"), "label": "1.5"}
    params = tmp_path / "launch_params.yaml"
    params.write_text(yaml.safe_dump({"/**/velobins_eval": {"ros__parameters": typed}}))
    proc = _start_eval_node(tmp_path, ["--params-file", str(params)])
    try:
        values = _get_parameters(ros_domain, "/velobins_eval", list(typed), timeout=30)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=15)[0]
    assert values == typed, out

    # The untyped way: rcl reads 001 as an integer; the node says which parameter and how to fix it.
    bad = _start_eval_node(tmp_path, ["-p", "flight:=001"])
    out = bad.communicate(timeout=60)[0]
    assert bad.returncode != 0, out
    assert "'flight': expected a string, got int 1" in out and "value_type=str" in out, out
    assert "Traceback" not in out, out


def _get_parameters(domain: int, node_name: str, names: list[str], timeout: float) -> dict[str, object]:
    import rclpy
    from rcl_interfaces.srv import GetParameters
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import parameter_value_to_python
    from rclpy.signals import SignalHandlerOptions

    ctx = Context()
    rclpy.init(args=[], context=ctx, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
    executor = SingleThreadedExecutor(context=ctx)
    node = rclpy.create_node("launch_args_test_client", context=ctx)
    try:
        client = node.create_client(GetParameters, f"{node_name}/get_parameters")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if client.wait_for_service(timeout_sec=0.5):
                future = client.call_async(GetParameters.Request(names=names))
                rclpy.spin_until_future_complete(node, future, executor=executor, timeout_sec=5.0)
                if future.result() is not None:
                    return {n: parameter_value_to_python(v) for n, v in zip(names, future.result().values, strict=True)}
        return {}
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)


@pytest.mark.parametrize(
    ("namespace", "prefix"),
    [("", ""), ("/", ""), ("/drone1", "drone1/"), ("drone1", "drone1/"), ("/fleet/a/", "fleet/a/"), (" /d ", "d/")],
)
def test_frame_prefix_of_a_namespace(namespace: str, prefix: str) -> None:
    assert la.frame_prefix_for(namespace) == prefix


def test_frame_prefix_defaults_from_the_namespace_in_both_tables() -> None:
    for table in (la.DRONE_ARGS, la.REPLAY_ARGS):
        names = [a.name for a in table]
        assert names.index("namespace") < names.index("frame_prefix")  # declared first: the default reads it
        assert next(a for a in table if a.name == "frame_prefix").default == la.NAMESPACE_PREFIX
        assert {"respawn", "respawn_delay"} <= set(names)


PRESETS = Path(__file__).resolve().parents[1] / "config" / "rotor_bridge"


def test_rotor_bridge_takes_a_preset_name_or_a_preset_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert la.rotor_bridge_presets(PRESETS)[:2] == ["crazyflie_pwm", "joint_state"]
    assert la.resolve_rotor_bridge("", PRESETS) is None
    assert la.resolve_rotor_bridge(" mavros_esc_status ", PRESETS) == str(PRESETS / "mavros_esc_status.yaml")
    own = tmp_path / "my_bridge.yaml"
    own.write_text((PRESETS / "joint_state.yaml").read_text())
    assert la.resolve_rotor_bridge(str(own), PRESETS) == str(own)
    monkeypatch.chdir(tmp_path)
    assert la.resolve_rotor_bridge("my_bridge.yaml", PRESETS) == str(own)  # relative to where launch runs
    for key in ("velobins_rotor_bridge", "/drone1/velobins_rotor_bridge", "/**"):
        own.write_text(f"{key}:\n  ros__parameters:\n    num_rotors: 6\n")
        assert la.resolve_rotor_bridge(str(own), PRESETS) == str(own), key


@pytest.mark.parametrize(
    ("content", "value", "message"),
    [
        (None, "mavros_esc_statu", "rotor_bridge:=mavros_esc_statu: no such preset or file (presets: crazyflie_pwm, "),
        (None, "/no/such/file.yaml", "rotor_bridge:=/no/such/file.yaml: no such preset or file (presets: "),
        ("a: [1,", "{file}", "cannot read it as YAML ("),
        ("- just a list", "{file}", "no '/**/velobins_rotor_bridge: ros__parameters:' section (start from a preset"),
        ("/**/velobins_ekf:\n  ros__parameters: {}\n", "{file}", "no '/**/velobins_rotor_bridge: ros__parameters:'"),
        ("/**/velobins_rotor_bridge:\n  input_type: x\n", "{file}", "no '/**/velobins_rotor_bridge: ros__parameters:'"),
    ],
)
def test_anything_else_is_one_line_naming_the_presets(
    tmp_path: Path, content: str | None, value: str, message: str
) -> None:
    file = tmp_path / "bridge.yaml"
    if content is not None:
        file.write_text(content)
    with pytest.raises(ValueError) as info:
        la.resolve_rotor_bridge(value.format(file=file), PRESETS)
    text = str(info.value)
    assert message in text and "\n" not in text, text
    if "YAML" not in message:
        assert "joint_state" in text and "px4_actuator_motors" in text, text
