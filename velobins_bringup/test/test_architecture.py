"""The shape of the code (issues 14 and 22): no import cycles, packages in layers, modules one can read.

The import graph is built from the sources with :mod:`ast` (imports inside functions count: a
cycle hidden in a function body is still a cycle), so the test needs nothing installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = {
    name: ROOT / name / name
    for name in (
        "velobins_common",
        "velobins_ros",
        "velobins_data",
        "velobins_net",
        "velobins_ekf",
        "velobins_bridges",
        "velobins_eval",
        "velobins_bringup",
    )
}

LAYERS = {
    "velobins_common": set(),
    "velobins_ros": {"velobins_common"},
    "velobins_data": {"velobins_common"},
    "velobins_net": {"velobins_common", "velobins_ros", "velobins_data"},
    "velobins_ekf": {"velobins_common", "velobins_ros", "velobins_data"},
    "velobins_bridges": {"velobins_common", "velobins_ros", "velobins_data"},
    "velobins_eval": {
        "velobins_common",
        "velobins_ros",
        "velobins_data",
        "velobins_net",
        "velobins_ekf",
        "velobins_bridges",
    },
    "velobins_bringup": {
        "velobins_common",
        "velobins_ros",
        "velobins_data",
        "velobins_net",
        "velobins_ekf",
        "velobins_bridges",
        "velobins_eval",
    },
}
"""Which of our packages each package may import (docs/design.md, "The packages"): the lowest first,
nothing imports upwards or sideways within a layer."""

MAX_MODULE_LINES = 500
NODE_MODULES = ("node", "replay_node", "eval_node", "rotor_node", "imu_node", "odom_out_node")


def modules() -> dict[str, Path]:
    """Every production module as dotted name → file."""
    out = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that ``name`` imports anywhere in its body (module or package names)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), i.e. import cycles.

    A package's ``__init__`` importing its own submodules is not a cycle of the code's design, so
    edges from a submodule to its enclosing package's ``__init__`` are left out.
    """
    edges = {
        a: {b for b in bs if not a.startswith(b + ".")}  # submodule -> its own package __init__
        for a, bs in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_graph_builder_sees_imports_inside_functions() -> None:
    graph = import_graph()
    assert "velobins_data.flight" in graph["velobins_data.validate"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_packages_import_only_lower_layers() -> None:
    wrong = []
    for module, targets in import_graph().items():
        package = module.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != package and other not in LAYERS[package]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_node_imports_another_node() -> None:
    graph = import_graph()
    nodes = {m for m in graph if m.rpartition(".")[2] in NODE_MODULES}
    wrong = [f"{m} imports {t}" for m in sorted(nodes) for t in sorted(graph[m] & nodes)]
    assert not wrong, "\n".join(wrong)


def test_modules_are_small_enough_to_read() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    big = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"


def test_the_network_uses_the_real_flight_type() -> None:
    """velobins_net reads flights through velobins_data's ``Flight``, not a protocol of its own."""
    graph = import_graph()
    users = sorted(
        m for m, targets in graph.items() if m.startswith("velobins_net.") and "velobins_data.flight" in targets
    )
    assert "velobins_net.data" in users
    text = (ROOT / "velobins_net" / "velobins_net" / "data.py").read_text(encoding="utf-8")
    assert "SequenceLike" not in text and "Protocol" not in text
