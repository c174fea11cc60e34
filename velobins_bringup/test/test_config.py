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
    from velobins_net.node import NetNodeConfig

    declared = {
        "velobins_net": {f.name for f in dataclasses.fields(NetNodeConfig)},
        "velobins_ekf": {f.name for f in dataclasses.fields(EkfNodeConfig)}
        | {"filter." + f.name for f in dataclasses.fields(EkfConfig)},
        "velobins_replay": {f.name for f in dataclasses.fields(ReplayConfig)},
        "velobins_eval": {f.name for f in dataclasses.fields(EvalNodeConfig)},
        "/**": {"use_sim_time"},
    }
    overrides = yaml.safe_load((CONFIG / "evaluation.yaml").read_text())
    for node, body in overrides.items():
        params = body["ros__parameters"]
        unknown = set(params) - declared[node]
        assert not unknown, f"{node}: unknown parameter(s) {unknown}"
    assert overrides["velobins_ekf"]["ros__parameters"]["init_mode"] == "ground_truth"
