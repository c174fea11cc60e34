"""Workspace-level checks: every package imports, executables are installed, lint is clean,
and no path of the build machine is committed."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_PACKAGES = (
    "velobins_common",
    "velobins_ros",
    "velobins_data",
    "velobins_net",
    "velobins_ekf",
    "velobins_bridges",
    "velobins_eval",
    "velobins_bringup",
)


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_every_module_imports_and_says_what_it_is_for(package: str) -> None:
    """Each module of the package, not only its ``__init__``: a module no other test reaches (a node, a
    command) still fails here on a broken import, and one without a docstring fails STYLE.md's rule."""
    root = importlib.import_module(package)
    found = pkgutil.walk_packages(root.__path__, prefix=f"{package}.")
    names = [root.__name__] + [m.name for m in found if not m.name.endswith(".__main__")]  # that one runs a CLI
    assert len(names) > 1, f"{package}: no modules found under {list(root.__path__)}"
    silent = [name for name in names if not (importlib.import_module(name).__doc__ or "").strip()]
    assert not silent, f"modules without a docstring saying what they are for: {silent}"


@pytest.mark.ros
def test_messages_import(ros_domain: int) -> None:
    from velobins_msgs.msg import RotorSpeeds, VelocityEstimate

    assert len(VelocityEstimate().covariance) == 9
    assert {RotorSpeeds.KIND_RAD_PER_SEC, RotorSpeeds.KIND_RPM, RotorSpeeds.KIND_NORMALIZED} == {0, 1, 2}


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    lint = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = subprocess.run([ruff, "format", "--check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_no_machine_paths_committed() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    # This checkout and this interpreter's install prefix: both differ on every machine.
    needles = (str(ROOT), sys.base_prefix)
    offenders = []
    for name in files:
        path = ROOT / name
        if not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        offenders += [f"{name}: {needle}" for needle in needles if needle in text]
    assert not offenders, offenders
