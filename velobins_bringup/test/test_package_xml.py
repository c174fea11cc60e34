"""Every package.xml declares what its package imports, so `rosdep install` can set up a plain ROS
install (issue 15, finding 6).

Each package's Python files are read as syntax trees (imports at the top and inside functions,
``importlib.import_module("...")`` with a constant name); every import that is not the standard
library, the package itself or a test-local helper maps to one dependency key, which must be
declared: exec dependencies for the package's modules and launch files, exec or test dependencies
for its tests. The mapping below is the one place that says which key an import needs; an import
it does not know fails the test until it is added there (with the real rosdep key, or ``None``
where rosdep has none: then the package.xml says so in a comment).
"""

from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = tuple(sorted(path.parent.name for path in ROOT.glob("velobins_*/package.xml")))

# Third-party Python: import name -> rosdep key (rosdistro's rosdep/base.yaml and python.yaml).
# None: rosdistro has no key; the package.xml must carry a comment "No rosdep key ... <name>".
PYTHON_KEYS: dict[str, str | None] = {
    "numpy": "python3-numpy",
    "scipy": "python3-scipy",
    "yaml": "python3-yaml",
    "matplotlib": "python3-matplotlib",
    "tqdm": "python3-tqdm",
    "rich": "python3-rich",
    "h5py": "python3-h5py",
    "torch": "python3-torch",
    "rosbags": "python3-rosbags-pip",
    "onnxruntime": "python3-onnxruntime-pip",
    "pytest": "python3-pytest",
    "plotly": "python3-plotly",
    "onnx": None,
    "rotorpy": None,
    "submitit": None,
    "cloudpickle": None,
    "tensorboard": None,
    "evo": None,
}
# pip distribution name -> import name, where they differ (docker/requirements.txt names distributions).
DISTRIBUTION_MODULES = {"pyyaml": "yaml"}

# ROS packages a Python import names: the module is the package, except where mapped.
ROS_PACKAGES = frozenset(
    {
        "action_msgs",
        "ament_index_python",
        "builtin_interfaces",
        "diagnostic_msgs",
        "geometry_msgs",
        "launch",
        "launch_ros",
        "launch_testing",
        "launch_testing_ros",
        "lifecycle_msgs",
        "message_filters",
        "nav_msgs",
        "rcl_interfaces",
        "rclpy",
        "rosbag2_py",
        "rosgraph_msgs",
        "rosidl_runtime_py",
        "sensor_msgs",
        "std_msgs",
        "std_srvs",
        "tf2_msgs",
        "visualization_msgs",
    }
)
ROS_MODULE_PACKAGE = {"tf2_ros": "tf2_ros_py"}
# Message packages the rotor bridge resolves by name at runtime (presets): never a declared
# dependency, named in a comment of the package.xml of the package that mentions them.
OPTIONAL_PACKAGES = ("mavros_msgs", "px4_msgs")
# Attribute uses and imports that need a distribution the code never imports itself (torch.onnx needs
# onnx, torch.utils.tensorboard needs tensorboard).
IMPLIED_IMPORTS = {"torch.onnx": "onnx", "torch.utils.tensorboard": "tensorboard"}

RUNTIME_KINDS = ("depend", "exec_depend", "build_export_depend")
ALL_KINDS = ("depend", "build_depend", "buildtool_depend", "build_export_depend", "exec_depend", "test_depend")
ROS_NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # ROS package names; rosdep system keys carry a '-'


class Manifest:
    """The dependencies (by kind) and the comments of one package.xml."""

    def __init__(self, path: Path) -> None:
        parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
        self.root = ET.parse(path, parser=parser).getroot()
        self.deps = {kind: {el.text.strip() for el in self.root.iter(kind) if el.text} for kind in ALL_KINDS}
        self.comments = " ".join(" ".join((el.text or "").split()) for el in self.root.iter() if el.tag is ET.Comment)

    def of(self, *kinds: str) -> set[str]:
        return set().union(*(self.deps[kind] for kind in kinds))

    @property
    def runtime(self) -> set[str]:
        return self.of(*RUNTIME_KINDS)

    def says_no_key(self, name: str) -> bool:
        return any(name in sentence for sentence in re.findall(r"No rosdep key[^.:]*", self.comments, re.IGNORECASE))


@cache
def manifest(package: str) -> Manifest:
    return Manifest(ROOT / package / "package.xml")


def python_files(package: str) -> list[Path]:
    base = ROOT / package
    return sorted(p for p in base.rglob("*.py") if p.name != "setup.py" and "__pycache__" not in p.parts)


def is_test(package: str, path: Path) -> bool:
    return "test" in path.relative_to(ROOT / package).parts[:-1]


def own_modules(package: str) -> set[str]:
    """The importable names the package installs: itself and its top-level Python packages."""
    base = ROOT / package
    return {package} | {p.parent.name for p in base.glob("*/__init__.py")}


def imported_names(path: Path) -> set[str]:
    """Top-level names of every absolute import in ``path`` (any depth), plus IMPLIED_IMPORTS."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and _dotted(node) in IMPLIED_IMPORTS:
            names.add(IMPLIED_IMPORTS[_dotted(node)])
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.add(IMPLIED_IMPORTS.get(node.module, node.module))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
            and len(node.args) == 1
        ):
            names.add(node.args[0].value)
    return {name.split(".")[0] for name in names}


def _dotted(node: ast.expr) -> str:
    """``a.b.c`` for an attribute chain on a name, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def dependency_key(module: str) -> str | None:
    """The dependency key an import needs; KeyError for an import the mapping does not know."""
    if module in ROS_MODULE_PACKAGE:
        return ROS_MODULE_PACKAGE[module]
    if module in ROS_PACKAGES or module.startswith("velobins_") or module in OPTIONAL_PACKAGES:
        return module
    return PYTHON_KEYS[module]


def required(package: str, tests: bool) -> dict[str, set[str]]:
    """import name -> files, for the package's modules (tests=False) or its tests (tests=True)."""
    found: dict[str, set[str]] = {}
    own = own_modules(package)
    for path in python_files(package):
        if is_test(package, path) != tests:
            continue
        # Helpers beside the file (test fixtures, a launch file's siblings) are local modules.
        local = {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.glob("*/__init__.py")}
        # The shared dataset fixtures and the live-graph probe (root conftest.py puts both on sys.path).
        local |= {"fixtures_datasets", "graph_fixtures"}
        for name in imported_names(path):
            if name in sys.stdlib_module_names or name in own or name in local or name == "__future__":
                continue
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def runtime_closure(package: str) -> set[str]:
    """velobins_* packages ``package`` needs at run time, recursively."""
    seen: set[str] = set()
    todo = [package]
    while todo:
        for dep in manifest(todo.pop()).runtime:
            if dep.startswith("velobins_") and dep in PACKAGES and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _missing(package: str, tests: bool) -> list[str]:
    declared = manifest(package).runtime | (manifest(package).deps["test_depend"] if tests else set())
    problems = []
    for module, files in sorted(required(package, tests).items()):
        where = ", ".join(sorted(files)[:3])
        try:
            key = dependency_key(module)
        except KeyError:
            problems.append(f"import {module!r} ({where}) is unknown: add it to PYTHON_KEYS or ROS_PACKAGES")
            continue
        if module in OPTIONAL_PACKAGES:
            continue  # test_optional_packages
        if key is None:
            if not manifest(package).says_no_key(module):
                problems.append(f"{module} ({where}): no rosdep key, say so ('No rosdep key ... {module}')")
        elif key not in declared:
            if tests and key.startswith("velobins_") and package in runtime_closure(key):
                # Declaring it would close a cycle colcon refuses; the package.xml says why.
                if key in manifest(package).comments:
                    continue
                problems.append(f"{key} ({where}): a cycle if declared, say so in a package.xml comment")
                continue
            kind = "test_depend (or exec_depend)" if tests else "exec_depend"
            problems.append(f"<{kind}>{key}</...> missing for import {module!r} ({where})")
    return problems


@pytest.mark.parametrize("package", PACKAGES)
def test_module_imports_are_declared(package: str) -> None:
    problems = _missing(package, tests=False)
    assert not problems, f"{package}/package.xml:\n" + "\n".join(problems)


@pytest.mark.parametrize("package", PACKAGES)
def test_test_imports_are_declared(package: str) -> None:
    problems = _missing(package, tests=True)
    assert not problems, f"{package}/package.xml:\n" + "\n".join(problems)


def test_all_six_packages_are_checked() -> None:
    expected = {"velobins_common", "velobins_msgs", "velobins_net", "velobins_ekf", "velobins_eval", "velobins_bringup"}
    assert expected <= set(PACKAGES)
    for package in PACKAGES:
        assert python_files(package) or package == "velobins_msgs", package


@pytest.mark.parametrize("package", PACKAGES)
def test_manifest_is_format_3_and_names_itself(package: str) -> None:
    root = manifest(package).root
    assert root.get("format") == "3"
    assert root.findtext("name") == package
    assert root.find("export/build_type") is not None
    catkin_pkg = pytest.importorskip("catkin_pkg.package")
    catkin_pkg.parse_package(ROOT / package / "package.xml").validate()


@pytest.mark.parametrize("package", PACKAGES)
def test_velobins_dependencies_exist_and_form_no_cycle(package: str) -> None:
    declared = manifest(package).of(*ALL_KINDS)
    unknown = {dep for dep in declared if dep.startswith("velobins_") and dep not in PACKAGES}
    assert not unknown, f"{package} depends on packages that do not exist: {unknown}"
    assert package not in declared
    # colcon orders packages by every kind of dependency, test ones included.
    seen: set[str] = set()
    todo = [dep for dep in declared if dep in PACKAGES]
    while todo:
        dep = todo.pop()
        assert dep != package, f"{package} depends on itself through {seen}"
        if dep not in seen:
            seen.add(dep)
            todo += [d for d in manifest(dep).of(*ALL_KINDS) if d in PACKAGES]


@pytest.mark.parametrize("package", PACKAGES)
def test_python_keys_are_known_rosdep_keys(package: str) -> None:
    """A system key (with a '-') must be one the mapping knows, not a guess."""
    known = {key for key in PYTHON_KEYS.values() if key}
    guessed = {d for d in manifest(package).of(*ALL_KINDS) if not ROS_NAME.match(d)} - known
    assert not guessed, f"{package}: keys not in PYTHON_KEYS: {guessed}"


def test_optional_packages() -> None:
    """mavros_msgs / px4_msgs: never a declared dependency (velobins_rotor_bridge resolves its
    presets' message types by name at runtime); velobins_net's package.xml names them."""
    for package in PACKAGES:
        declared = manifest(package).of(*ALL_KINDS) & set(OPTIONAL_PACKAGES)
        assert not declared, f"{package} declares optional {declared}: the bridge resolves them at runtime"
    for name in OPTIONAL_PACKAGES:
        assert name in manifest("velobins_bridges").comments, f"velobins_bridges/package.xml: say {name} is optional"


def test_detector_sees_function_level_and_dynamic_imports(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "import importlib\n"
        "def f():\n    from sensor_msgs.msg import Imu\n    import rotorpy.world\n"
        "def g(model):\n    torch.onnx.export(model)\n    return importlib.import_module('diagnostic_msgs.msg')\n"
    )
    assert imported_names(module) == {"importlib", "sensor_msgs", "rotorpy", "onnx", "diagnostic_msgs"}
    assert dependency_key("tf2_ros") == "tf2_ros_py"
    with pytest.raises(KeyError):
        dependency_key("some_new_distribution")
