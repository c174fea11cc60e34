"""The Docker image (which cannot be built here) stays consistent with the bootstrap's pins."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_docker_pins_match_lock() -> None:
    lock = _pins(ROOT / "requirements.lock")
    docker = _pins(ROOT / "docker" / "requirements.txt")
    assert docker, "docker/requirements.txt has no pins"
    mismatched = {name: (version, lock.get(name)) for name, version in docker.items() if lock.get(name) != version}
    assert not mismatched, f"docker pin != lock pin: {mismatched}"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    torch_pin = re.search(r'"torch==([^"]+)"', dockerfile)
    assert torch_pin and torch_pin.group(1) == lock["torch"]


def test_compose_and_entrypoint_reference_existing_files() -> None:
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    for launch in re.findall(r"\"([a-z_]+\.launch\.py)\"", compose):
        assert (ROOT / "velobins_bringup" / "launch" / launch).is_file(), launch
    assert "velobins.rviz" in compose and (ROOT / "velobins_bringup" / "rviz" / "velobins.rviz").is_file()
    assert (ROOT / "docker" / "entrypoint.sh").stat().st_mode & 0o111, "entrypoint must be executable"
