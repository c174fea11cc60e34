"""declare_config: ranges, read-only and live parameters, and ints for floats, on a real rclpy node."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from velobins_common.fields import param


@dataclass(frozen=True)
class DemoConfig:
    """A node config with every kind of field."""

    rate: float = param(50.0, min=0.0, max=1000.0, live=True)
    """Output rate [Hz]."""
    depth: int = param(10, min=1)
    """Queue depth (read at start-up)."""
    mode: str = param("align", choices=("align", "ground_truth"))
    """Start-up mode."""
    axes: tuple[float, ...] = (0.0, 0.0, 0.0, 1.0)
    """A quaternion."""
    factors: tuple[float, ...] = param((1.0, 1.0, 1.0), min=1e-6, max=1e6, live=True)
    """Per-axis factors (like ``predictor.axis_variance_factors``): a live array with bounds on every element."""

    def __post_init__(self) -> None:
        if len(self.axes) != 4:
            raise ValueError(f"axes: expected 4 values, got {len(self.axes)}")
        if len(self.factors) != 3:
            raise ValueError(f"factors: expected 3 values, got {len(self.factors)}")


@pytest.fixture
def make_node():
    import rclpy
    from rclpy.context import Context

    ctx = Context()
    rclpy.init(args=[], context=ctx)
    nodes = []

    def make(**overrides):
        from rclpy.node import Node
        from rclpy.parameter import Parameter

        params = [Parameter(k, value=v) for k, v in overrides.items()]
        node = Node("params_test", context=ctx, parameter_overrides=params)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.destroy_node()
    rclpy.shutdown(context=ctx)


@pytest.mark.ros
def test_int_for_float_and_descriptors(make_node) -> None:
    from velobins_ros import declare_config

    node = make_node(rate=50)  # odom_rate:=50 style: an int for a double
    cfg = declare_config(node, DemoConfig())
    assert cfg.rate == 50.0 and isinstance(cfg.rate, float)
    assert cfg.axes == (0.0, 0.0, 0.0, 1.0)
    rate, depth = node.describe_parameters(["rate", "depth"])
    assert rate.floating_point_range[0].from_value == 0.0 and rate.floating_point_range[0].to_value == 1000.0
    assert depth.integer_range[0].from_value == 1
    assert depth.read_only and "Queue depth" in depth.description
    assert node.describe_parameters(["rate"])[0].read_only  # live fields too, when nobody applies changes


@pytest.mark.ros
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rate": -1.0}, "'rate': must be >= 0"),
        ({"depth": 0}, "'depth': must be >= 1"),
        ({"mode": 1}, "'mode': expected a string, got int"),
        ({"mode": "gps"}, "'mode': must be one of 'align', 'ground_truth'"),
        ({"depth": 2.5}, "'depth': expected int"),
        ({"axes": [1.0, 0.0]}, "axes: expected 4 values"),
    ],
)
def test_bad_start_values_name_the_parameter(make_node, overrides, message) -> None:
    from velobins_ros import declare_config

    node = make_node(**overrides)
    with pytest.raises(Exception, match=message.replace("(", r"\(")):
        declare_config(node, DemoConfig())


@pytest.mark.ros
def test_live_change_applied_and_checked(make_node) -> None:
    from rclpy.parameter import Parameter

    from velobins_ros import declare_config

    node = make_node()
    seen: list[DemoConfig] = []
    declare_config(node, DemoConfig(), on_change=seen.append)
    assert not node.describe_parameters(["rate"])[0].read_only
    assert node.describe_parameters(["depth"])[0].read_only

    ok = node.set_parameters([Parameter("rate", value=200)])[0]  # an int, as `ros2 param set` sends "200"
    assert ok.successful, ok.reason
    assert seen and seen[-1].rate == 200.0

    bad = node.set_parameters([Parameter("rate", value=5000.0)])[0]
    assert not bad.successful and len(seen) == 1
    wrong_type = node.set_parameters([Parameter("rate", value="fast")])[0]
    assert not wrong_type.successful and "'rate'" in wrong_type.reason and len(seen) == 1
    frozen = node.set_parameters([Parameter("depth", value=20)])[0]
    assert not frozen.successful and len(seen) == 1
    assert node.get_parameter("depth").value == 10


@pytest.mark.ros
def test_live_array_checked_element_by_element(make_node) -> None:
    """A live array parameter (``predictor.axis_variance_factors``' kind): a new list applies as a tuple; an element
    out of range, or a list the config refuses (wrong length), is refused and changes nothing."""
    from rclpy.parameter import Parameter

    from velobins_ros import declare_config

    node = make_node()
    seen: list[DemoConfig] = []
    declare_config(node, DemoConfig(), on_change=seen.append)
    assert list(node.get_parameter("factors").value) == [1.0, 1.0, 1.0]
    ok = node.set_parameters([Parameter("factors", value=[0.5, 2.0, 4.0])])[0]
    assert ok.successful, ok.reason
    assert seen and seen[-1].factors == (0.5, 2.0, 4.0)
    for bad in ([0.5, 0.0, 4.0], [1.0, 2.0]):
        result = node.set_parameters([Parameter("factors", value=bad)])[0]
        assert not result.successful and "factors" in result.reason, (bad, result.reason)
    assert len(seen) == 1 and seen[-1].factors == (0.5, 2.0, 4.0)
