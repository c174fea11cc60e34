"""``model:=`` / ``model_path:=`` of the launch files (issue 16), through the pure function they call.

``launch`` is not installable here, so the launch files' ``OpaqueFunction`` is checked in its two
parts: :func:`velobins_bringup.launch_args.resolve_launch_model` (called here) and the launch
files' source (the call is there, and the overlays go after ``params_file``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from velobins_bringup import launch_args as la
from velobins_net.pretrained import MODELS_DIR

LAUNCH_DIR = Path(__file__).resolve().parents[1] / "launch"


def test_a_shipped_name_gives_its_checkpoint_and_overlay() -> None:
    chosen = la.resolve_launch_model("crazyflie", "")
    assert chosen == la.LaunchModel(str(MODELS_DIR / "crazyflie.pt"), (str(MODELS_DIR / "crazyflie.yaml"),))
    assert la.resolve_launch_model("", "crazyflie-reg").overlays == (str(MODELS_DIR / "crazyflie-reg.yaml"),)


def test_a_checkpoint_path_is_used_as_is_without_an_overlay(tmp_path: Path) -> None:
    own = tmp_path / "best.pt"
    own.write_bytes(b"weights")
    assert la.resolve_launch_model("", str(own)) == la.LaunchModel(str(own), ())
    assert la.resolve_launch_model(f" {own} ", "") == la.LaunchModel(str(own), ())


@pytest.mark.parametrize(
    ("model", "model_path", "message"),
    [
        ("", "", "a model is required: model:=NAME (shipped: crazyflie, crazyflie-reg"),
        ("crazyflie", "/m/best.pt", "give model:= or model_path:=, not both"),
        ("crazyfly", "", "crazyfly: no such checkpoint file, and no shipped model of that name (shipped: crazyflie"),
    ],
)
def test_missing_both_or_unknown_is_one_line(model: str, model_path: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        la.resolve_launch_model(model, model_path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_both_launch_files_declare_model_and_load_the_overlay_after_params_file() -> None:
    for table in (la.DRONE_ARGS, la.REPLAY_ARGS):
        args = {a.name: a for a in table}
        assert args["model"].default == "" and args["model_path"].default == ""
    for name in ("drone.launch.py", "replay_eval.launch.py"):
        source = (LAUNCH_DIR / name).read_text()
        assert "OpaqueFunction(function=stack)" in source, name
        assert 'resolve_launch_model(arg("model").perform(context), arg("model_path").perform(context))' in source
        assert '"model_path": fixed(chosen.checkpoint, str)' in source, name
    drone = (LAUNCH_DIR / "drone.launch.py").read_text()
    # params_file, the model's overlay, then the vehicle's platform file (velobins_bringup.vehicle)
    assert 'files = [arg("params_file"), *chosen.overlays, *vehicle.files]' in drone
    replay = (LAUNCH_DIR / "replay_eval.launch.py").read_text()
    assert "parameters=[*files, *overlays," in replay  # params_file, evaluation.yaml, then the overlay
