"""The Docker image, checked without a Docker engine (there is none here; docs/docker.md says what
that leaves unverified): pins equal the lock, Python packages go into a venv on top of apt's and
that venv comes first, the vehicle target has no RViz, the documented commands pass the required
model_path, compose uses existing targets and launch files, apt's ROS packages are the package.xml
dependencies."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from test_package_xml import (
    ALL_KINDS,
    PACKAGES,
    PYTHON_KEYS,
    ROS_NAME,
    manifest,
    required,
)

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCS = ROOT / "docs" / "docker.md"
VENV_PIP = '"${VIRTUAL_ENV}/bin/pip" install'
VENV_PYTHON = '"${VIRTUAL_ENV}/bin/python3"'
# Third-party modules the image gets from apt, not docker/requirements.txt (ROS itself needs them).
APT_PYTHON_MODULES = {"yaml": "python3-yaml (a dependency of ROS 2 itself)"}
GUI_PACKAGE = re.compile(r"rviz|rqt|qt|libgl|x11|xserver|mesa|gazebo|\bgz-", re.IGNORECASE)


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def _logical_lines(text: str) -> list[str]:
    """Lines with comments dropped and backslash continuations joined."""
    kept = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [" ".join(line.split()) for line in "\n".join(kept).replace("\\\n", " ").splitlines() if line.strip()]


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [args for keyword, args in self.instructions if keyword == "RUN"]

    def apt_packages(self) -> set[str]:
        found = set()
        for run in self.runs():
            for command in re.split(r"&&|;", run):
                words = command.split()
                if words[:2] == ["apt-get", "install"]:
                    found |= {w for w in words[2:] if not w.startswith("-")}
        return found


def stages() -> dict[str, Stage]:
    """The Dockerfile's stages in order (dicts keep insertion order)."""
    result: dict[str, Stage] = {}
    current = None
    for line in _logical_lines((DOCKER / "Dockerfile").read_text()):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.match(r"(\S+)\s+AS\s+(\S+)", args, re.IGNORECASE)
            assert match, f"every stage is named: FROM {args}"
            current = Stage(match.group(2), match.group(1))
            result[current.name] = current
        elif current is not None:
            current.instructions.append((keyword, args))
    return result


def lineage(name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    all_stages = stages()
    chain = [all_stages[name]]
    while chain[-1].base in all_stages:
        chain.append(all_stages[chain[-1].base])
    return chain


def apt_packages_of(name: str) -> set[str]:
    return set().union(*(stage.apt_packages() for stage in lineage(name)))


def ros_apt_packages() -> set[str]:
    """``ros-${ROS_DISTRO}-x-y`` installs of all stages, as ROS package names (x_y)."""
    names = set().union(*(stage.apt_packages() for stage in stages().values()))
    return {n.removeprefix("ros-${ROS_DISTRO}-").replace("-", "_") for n in names if n.startswith("ros-${ROS_DISTRO}-")}


def declared_ros_dependencies() -> set[str]:
    """ROS packages the six package.xml files need to build and run (tests excluded: the image
    builds with BUILD_TESTING=OFF and ships no tests)."""
    kinds = [kind for kind in ALL_KINDS if kind != "test_depend"]
    names = set().union(*(manifest(package).of(*kinds) for package in PACKAGES))
    return {n for n in names if ROS_NAME.match(n) and not n.startswith("velobins_")}


def _commands(text: str, pattern: str) -> list[str]:
    """Shell commands (continuations joined, '#' comment markers stripped) mentioning ``pattern``."""
    lines = [re.sub(r"^\s*#\s?", "", line) for line in text.splitlines()]
    joined = "\n".join(lines).replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if re.search(pattern, line)]


# ------------------------------------------------------------------------------------------ pins
def test_docker_pins_match_lock() -> None:
    lock = _pins(ROOT / "requirements.lock")
    docker = _pins(DOCKER / "requirements.txt")
    assert docker, "docker/requirements.txt has no pins"
    mismatched = {name: (version, lock.get(name)) for name, version in docker.items() if lock.get(name) != version}
    assert not mismatched, f"docker pin != lock pin: {mismatched}"
    dockerfile = (DOCKER / "Dockerfile").read_text()
    torch_pin = re.search(r'"torch==([^"]+)"', dockerfile)
    assert torch_pin and torch_pin.group(1) == lock["torch"]


def test_image_installs_every_imported_distribution() -> None:
    """Every third-party module a package imports at run time is installed in the image."""
    installed = set(_pins(DOCKER / "requirements.txt")) | {"torch"}
    missing = {}
    for package in PACKAGES:
        for module, files in required(package, tests=False).items():
            if module in PYTHON_KEYS and module not in installed and module not in APT_PYTHON_MODULES:
                missing[module] = sorted(files)[0]
    assert not missing, f"imported but not installed by docker/requirements.txt: {missing}"


# ------------------------------------------------------------------------------------ the venv
def test_venv_with_system_site_packages_comes_first() -> None:
    runtime = lineage("vehicle")[-1]
    envs = " ".join(args for keyword, args in runtime.instructions if keyword == "ENV")
    venv = re.search(r"VIRTUAL_ENV=(\S+)", envs)
    assert venv, "ENV VIRTUAL_ENV=... in the base stage"
    assert any('-m venv --system-site-packages "${VIRTUAL_ENV}"' in run for run in runtime.runs())
    path = re.search(r"\bPATH=(\S+)", envs)
    assert path and path.group(1).startswith(f"{venv.group(1)}/bin:"), "the venv must lead PATH"
    # The entrypoint re-prepends it after the setup scripts (which prepend /opt/ros/.../bin).
    entry = (DOCKER / "entrypoint.sh").read_text()
    export = re.search(r'^export PATH="\$\{VIRTUAL_ENV\}/bin:', entry, re.MULTILINE)
    assert export, 'entrypoint.sh: export PATH="${VIRTUAL_ENV}/bin:..."'
    sources = [m.start() for m in re.finditer(r"^source ", entry, re.MULTILINE)]
    assert sources and export.start() > max(sources), "the venv goes first after sourcing ROS"
    assert (DOCKER / "entrypoint.sh").stat().st_mode & 0o111, "entrypoint must be executable"


def test_no_pip_install_into_the_system_python() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "break-system-packages" not in text.lower() and "PIP_BREAK_SYSTEM_PACKAGES" not in text
    for stage in stages().values():
        assert "python3-pip" not in stage.apt_packages(), "pip comes with the venv"
        for run in stage.runs():
            for command in re.split(r"&&|;", run):
                if re.search(r"\bpip3?\s+install\b", command):
                    assert command.strip().startswith(VENV_PIP), f"pip outside the venv: {command.strip()}"


def test_colcon_build_runs_with_the_venv_python() -> None:
    runs = [run for stage in stages().values() for run in stage.runs()]
    build = [run for run in runs if "colcon" in run]
    assert len(build) == 1, build
    assert f'{VENV_PYTHON} "$(command -v colcon)" build' in build[0], "entry points must get the venv's shebang"
    assert "--cmake-args -DBUILD_TESTING=OFF" in build[0]
    assert "python3 -m velobins_net.accel.native" in build[0], "native kernels warmed up at build"
    assert "docker/check_image.py" in build[0] and (DOCKER / "check_image.py").is_file()


# ---------------------------------------------------------------------------------- the targets
def test_vehicle_is_the_default_target_and_has_no_gui() -> None:
    names = list(stages())
    assert names[-1] == "vehicle", "the last stage is what `docker build` builds by default"
    gui = {p for p in apt_packages_of("vehicle") if GUI_PACKAGE.search(p)}
    assert not gui, f"the vehicle image ships GUI packages: {gui}"
    for name in ("vehicle", "viz"):
        copies = [args for keyword, args in stages()[name].instructions if keyword == "COPY"]
        assert any(c.startswith("--from=build /ws/install") for c in copies), name


def test_viz_target_adds_rviz() -> None:
    assert "ros-${ROS_DISTRO}-rviz2" in apt_packages_of("viz")
    assert "rviz" in (ROOT / "velobins_bringup" / "package.xml").read_text()


def test_default_command_does_not_run_without_a_model() -> None:
    vehicle = stages()["vehicle"]
    cmd = [args for keyword, args in vehicle.instructions if keyword == "CMD"]
    assert cmd and "launch" not in cmd[-1], f"the default CMD must not start the stack without model_path: {cmd}"
    entry = (DOCKER / "entrypoint.sh").read_text()
    assert re.search(r"usage\)\s*usage[^;]*;\s*exit 2", entry), "CMD usage prints how to run and exits 2"


def test_documented_run_commands_pass_model_path() -> None:
    assert DOCS.is_file(), "docs/docker.md"
    sources = {
        "Dockerfile header": (DOCKER / "Dockerfile").read_text(),
        "entrypoint usage": (DOCKER / "entrypoint.sh").read_text(),
        "docs/docker.md": DOCS.read_text(),
    }
    for where, text in sources.items():
        commands = [c for c in _commands(text, r"\.launch\.py") if re.search(r"ros2 launch|docker run", c)]
        assert commands, f"{where}: no documented run command"
        for command in commands:
            assert re.search(r"model_path:=\S+", command), f"{where}: {command!r} lacks model_path:=..."


def test_compose_services_use_existing_targets_and_launch_files() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    targets = set(stages())
    launch_dir = ROOT / "velobins_bringup" / "launch"
    declared_args = " ".join(p.read_text() for p in (ROOT / "velobins_bringup").rglob("*.py") if "test" not in p.parts)
    for name, service in compose["services"].items():
        build = service["build"]
        assert build["dockerfile"] == "docker/Dockerfile" and build.get("target") in targets, name
        assert service["image"] == f"velobins:{build['target']}", name
        command = service["command"]
        launch = [word for word in command if word.endswith(".launch.py")]
        for file in launch:
            assert (launch_dir / file).is_file(), f"{name}: {file}"
            assert build["target"] == "vehicle", f"{name} runs the stack: target vehicle"
            assert any(word.startswith("model_path:=") for word in command), f"{name}: model_path:= is required"
            for word in command:
                if ":=" in word:
                    arg = word.split(":=")[0]
                    assert f'"{arg}"' in declared_args, f"{name}: launch argument {arg} is not declared"
        if "rviz2" in command:
            assert build["target"] == "viz", f"{name}: RViz lives in target viz"
            config = command[command.index("-d") + 1]
            rel = config.split("/share/velobins_bringup/")[-1]
            assert (ROOT / "velobins_bringup" / rel).is_file(), config
    assert "rviz" in compose["services"] and compose["services"]["rviz"].get("profiles"), (
        "RViz does not start with a plain `up` on the vehicle"
    )


# ------------------------------------------------------------------------- apt <-> package.xml
def test_apt_ros_packages_are_the_declared_dependencies() -> None:
    apt = ros_apt_packages()
    declared = declared_ros_dependencies()
    assert apt - declared == set(), f"apt installs ROS packages no package.xml declares: {apt - declared}"
    assert declared - apt == set(), f"package.xml dependencies the image does not install: {declared - apt}"


def test_parser_sees_stages_and_apt_packages() -> None:
    all_stages = stages()
    assert {"runtime", "build", "viz", "vehicle"} <= set(all_stages)
    assert [s.name for s in lineage("vehicle")] == ["vehicle", "runtime"]
    assert "ros-${ROS_DISTRO}-diagnostic-msgs" in apt_packages_of("vehicle")
    assert {"diagnostic_msgs", "rviz2", "tf2_ros_py"} <= ros_apt_packages()
