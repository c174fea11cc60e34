"""The parameter files are the nodes' own defaults, and every override names a real parameter."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "velobins_bringup" / "config"


@pytest.mark.ros
def test_yaml_is_generated_from_the_dataclasses(ros_domain: int) -> None:
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_config.py"), "--check"], capture_output=True)
    assert check.returncode == 0, check.stderr.decode()


@pytest.mark.ros
def test_evaluation_overrides_name_declared_parameters(ros_domain: int) -> None:
    from velobins_ekf.config import EkfConfig
    from velobins_ekf.node import EkfNodeConfig
    from velobins_eval.eval_node import EvalNodeConfig
    from velobins_eval.replay_node import ReplayConfig
    from velobins_net.inference import PredictorConfig
    from velobins_net.node import NetNodeConfig

    declared = {
        "velobins_net": {f.name for f in dataclasses.fields(NetNodeConfig)}
        | {"predictor." + f.name for f in dataclasses.fields(PredictorConfig)},
        "velobins_ekf": {f.name for f in dataclasses.fields(EkfNodeConfig)}
        | {"filter." + f.name for f in dataclasses.fields(EkfConfig)},
        "velobins_replay": {f.name for f in dataclasses.fields(ReplayConfig)},
        "velobins_eval": {f.name for f in dataclasses.fields(EvalNodeConfig)},
        "/**": {"use_sim_time"},
    }
    for path in sorted(CONFIG.glob("*.yaml")):
        for key, body in yaml.safe_load(path.read_text()).items():
            assert key == "/**" or key.startswith("/**/"), f"{path.name}: key {key!r} would not apply under a namespace"
            node = key.removeprefix("/**/")
            params = set(_flatten(body["ros__parameters"]))
            unknown = params - declared[node] - {"use_sim_time"}
            assert not unknown, f"{path.name}: {node}: unknown parameter(s) {unknown}"
    overrides = yaml.safe_load((CONFIG / "evaluation.yaml").read_text())
    assert overrides["/**/velobins_ekf"]["ros__parameters"]["init_mode"] == "ground_truth"


def _flatten(params: dict, prefix: str = "") -> list[str]:
    """Dotted parameter names of a nested ros__parameters mapping (as rcl flattens them)."""
    out = []
    for key, value in params.items():
        out += _flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else [prefix + key]
    return out
