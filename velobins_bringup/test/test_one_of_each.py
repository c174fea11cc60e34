"""One of each (issue 22): every formula of the paper and every listed constant is written once in the tree.

An :mod:`ast` scan of every Python file of the repository (packages, tests, benchmarks, scripts,
launch files; not the colcon ``build``/``install``/``log`` trees) finds:

* **constant names** assigned outside their home (``STANDARD_GRAVITY = …`` anywhere but
  ``velobins_common/constants.py``, ``_HALF_LOG_2PI = …`` anywhere but ``velobins_common/stats.py``,
  ``_QUAT_NORM_TOL`` …: leading underscores and spelling variants count);
* **constant values** written again: 9.80665, ½ log 2π, the χ²₃ 95 % bounds 0.216/9.348 and median
  2.366, 2π/60, and a literal tuple of the rotor kinds. In production code any occurrence counts; in
  tests only a module- or class-level assignment does (a fixture constant such as ``G = 9.80665``):
  an assertion may compare with a number on purpose;
* **formulas** written again: a second definition of a listed formula name (``gaussian_nll``,
  ``nees``, ``chi2_quantile``, ``quaternion_to_matrix``, ``so3_exp``, ``error_conditioned_labels``…),
  a function whose body is a copy (names renamed, same structure) of a function in a formula home
  file, the Gaussian normaliser ``log(2π)`` typed again, scipy's χ² used instead of the one home.
  Test oracles are independent reference implementations on purpose, so test files count only for
  constants.

Known copies in files that other engineers own are listed in :data:`PENDING` with their owner; an
entry that no longer matches fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
"""This file lists the values it looks for: it is not scanned."""
SKIP_DIRS = {"build", "install", "log", "node_modules", "__pycache__"}

COMMON = "velobins_common/velobins_common"
CONSTANT_HOMES: dict[str, str] = {
    "STANDARD_GRAVITY": f"{COMMON}/constants.py",
    "ROTOR_KINDS": f"{COMMON}/constants.py",
    "ROTOR_SPEED": f"{COMMON}/constants.py",
    "ROTOR_COMMAND": f"{COMMON}/constants.py",
    "LEGACY_ROTOR_KINDS": f"{COMMON}/constants.py",
    "RPM_TO_RAD_PER_S": f"{COMMON}/constants.py",
    "UNIT_QUATERNION_TOLERANCE": f"{COMMON}/constants.py",
    "HALF_LOG_2PI": f"{COMMON}/stats.py",
    "NEES_DOF": f"{COMMON}/stats.py",
    "NEES_CONFIDENCE": f"{COMMON}/stats.py",
    "NEES_BOUNDS": f"{COMMON}/stats.py",
    "NEES_IDEAL_MEDIAN": f"{COMMON}/stats.py",
}
"""Listed constant → the one file that may assign it."""

NAME_VARIANTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^_*(STANDARD_)?GRAVITY(_MAGNITUDE)?$"), "STANDARD_GRAVITY"),
    (re.compile(r"^_*(HALF_)?LOG_?2_?PI$"), "HALF_LOG_2PI"),
    (re.compile(r"^_*\w*QUAT\w*_(NORM_)?TOL(ERANCE)?$"), "UNIT_QUATERNION_TOLERANCE"),
    (re.compile(r"^_*UNIT_(NORM_)?TOL(ERANCE)?$"), "UNIT_QUATERNION_TOLERANCE"),
    (re.compile(r"^_*NEES_NOMINAL_SHARE$"), "NEES_CONFIDENCE"),
    (re.compile(r"^_*RPM_TO_RAD(_PER_S(EC)?)?$"), "RPM_TO_RAD_PER_S"),
]
"""Spellings of a listed constant under another name (a copy renamed is still a copy)."""

VALUES: list[tuple[str, float, float, str]] = [
    ("standard gravity 9.80665", 9.80665, 1e-9, "STANDARD_GRAVITY"),
    ("½ log 2π", 0.5 * math.log(2.0 * math.pi), 1e-9, "HALF_LOG_2PI"),
    ("χ²₃ 2.5 % point 0.216", 0.21580, 6e-4, "NEES_BOUNDS"),
    ("χ²₃ 97.5 % point 9.348", 9.34840, 6e-4, "NEES_BOUNDS"),
    ("χ²₃ median 2.366", 2.36597, 6e-4, "NEES_IDEAL_MEDIAN"),
    ("rpm → rad/s 2π/60", 2.0 * math.pi / 60.0, 1e-9, "RPM_TO_RAD_PER_S"),
]
"""(what, value, absolute tolerance, the constant that holds it)."""

ROTOR_KIND_NAMES = ({"rpm", "pwm"}, {"speed", "command"})
"""A literal collection of exactly these strings is the rotor-kind list written again."""

STATS, FRAMES = f"{COMMON}/stats.py", f"{COMMON}/frames.py"
FORMULA_NAMES: dict[str, str | None] = {
    "chi2_cdf": STATS,
    "chi2_quantile": STATS,
    "chi2_bounds": STATS,
    "gaussian_nll": STATS,
    "gaussian_nll_full": STATS,
    "gaussian_nll_samples": STATS,
    "nees": STATS,
    "quaternion_to_matrix": FRAMES,
    "matrix_to_quaternion": FRAMES,
    "quat_to_matrix": FRAMES,
    "matrix_to_quat": FRAMES,
    "quat_to_rot": FRAMES,
    "rot_to_quat": FRAMES,
    "skew": None,
    "so3_exp": None,
    "so3_log": None,
    "right_jacobian": None,
    "error_conditioned_labels": None,
    "gaussian_bin_mass": None,
    "tilt_to_mean": None,
    "huber_loss": None,
    "kl_loss": None,
    "gaussian_nll_sum_over_axes": None,
    "full_covariance_nll": None,
    "expected_velocity": None,
    "bin_variance": None,
    "laplace_scale": None,
    "laplace_variance": None,
    "ave": None,
    "rte": None,
    "ate": None,
    "align_trajectory": None,
    "nominal_step": None,
    "measurement_jacobian": None,
    "updated_covariance": None,
}
"""Formula → its home file, or None where only "defined once" is checked (the file may change)."""

FORMULA_FILES = (
    STATS,
    FRAMES,
    "velobins_ekf/velobins_ekf/so3.py",
    "velobins_ekf/velobins_ekf/propagation.py",
    "velobins_ekf/velobins_ekf/update.py",
    "velobins_net/velobins_net/labels.py",
    "velobins_net/velobins_net/losses.py",
    "velobins_net/velobins_net/bins.py",
    "velobins_net/velobins_net/decoders.py",
    "velobins_eval/velobins_eval/metrics.py",
)
"""Files whose functions are the paper's formulas: a structural copy of one elsewhere is a finding."""
MIN_COPY_NODES = 40
"""A function body must have this many AST nodes before a structural match counts (no one-liners)."""

PENDING: dict[tuple[str, str], str] = {}
"""Known copies in files other engineers own (issue 22), to be replaced by imports from the home:
train*.py's ``_HALF_LOG_2PI`` by ``velobins_common.stats.HALF_LOG_2PI``."""

ALLOWED: dict[tuple[str, str], str] = {
    ("velobins_net/velobins_net/baselines/frames.py", "defines so3_log"): (
        "AirIO's attitude encoding in torch (batched, on the training device, differentiable); the filter's "
        "velobins_ekf.so3.so3_log works on one numpy matrix"
    ),
    ("velobins_ekf/velobins_ekf/so3.py", "defines so3_log"): "the numpy twin of the torch encoding above",
}
"""Same name, another job: each entry says why it is not a copy."""


@dataclass(frozen=True)
class Finding:
    """One copy: the file (relative to the scanned root), what is copied (a stable key), and where."""

    path: str
    key: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.key} ({self.detail})"


# ----------------------------------------------------------------------------- the scan
def python_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file below ``root`` outside build trees and hidden folders."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(p in SKIP_DIRS or p.startswith(".") for p in rel[:-1]):
            continue
        yield path


def is_test_file(rel: str) -> bool:
    """Test modules, fixtures and oracles (a ``test``/``tests`` folder, ``test_*.py``, ``conftest.py``)."""
    parts = Path(rel).parts
    in_tests = any(p in ("test", "tests") for p in parts[:-1])
    return in_tests or parts[-1].startswith("test_") or parts[-1] == "conftest.py"


def canonical_constant(name: str) -> str | None:
    """The listed constant ``name`` spells, or None."""
    if name in CONSTANT_HOMES:
        return name
    stripped = name.lstrip("_")
    if stripped in CONSTANT_HOMES:
        return stripped
    for pattern, constant in NAME_VARIANTS:
        if pattern.match(name):
            return constant
    return None


def assigned_names(node: ast.AST) -> list[str]:
    """Names bound by an assignment statement (tuple targets unpacked)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    out: list[str] = []
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                out.append(sub.id)
    return out


def listed_value(value: object) -> tuple[str, str] | None:
    """(what, constant) when ``value`` is a listed number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    for what, ref, tol, constant in VALUES:
        if abs(float(value) - ref) <= tol:
            return what, constant
    return None


def is_rotor_kind_collection(node: ast.AST) -> bool:
    """A literal tuple/list/set whose elements are exactly the rotor kinds (old or new names)."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or not node.elts:
        return False
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return False
    return {e.value for e in node.elts} in ROTOR_KIND_NAMES  # type: ignore[attr-defined]


def mentions_pi(node: ast.AST) -> bool:
    """Whether π (``math.pi``, ``np.pi``, ``torch.pi``, ``pi``, τ) appears in ``node``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in ("pi", "tau"):
            return True
        if isinstance(sub, ast.Name) and sub.id in ("pi", "tau"):
            return True
    return False


def call_name(node: ast.Call) -> str:
    """The called name: ``log`` for ``math.log(...)``, ``np.log``, ``log``."""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


class _Canon(ast.NodeTransformer):
    """Renames every identifier by order of first appearance, so renamed copies compare equal."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self._name(node.id), ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg=self._name(node.arg)), node)


def body_fingerprint(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, int] | None:
    """A structural fingerprint of ``fn``'s body (docstring dropped, identifiers canonical) and its size."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return None
    canon = _Canon()
    module = ast.Module(body=[canon.visit(copy.deepcopy(s)) for s in body], type_ignores=[])
    size = sum(1 for _ in ast.walk(module))
    return ast.dump(module, annotate_fields=False), size


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def scan(root: Path) -> list[Finding]:
    """Every copy of a listed constant or formula below ``root`` (rules in the module docstring)."""
    trees: dict[str, ast.Module] = {}
    for path in python_files(root):
        rel = path.relative_to(root).as_posix()
        if root == ROOT and rel == SELF:
            continue
        try:
            trees[rel] = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        except SyntaxError as exc:
            raise AssertionError(f"{rel}: cannot parse ({exc})") from exc
    findings: list[Finding] = []
    for rel, tree in trees.items():
        findings += constant_findings(rel, tree)
        if not is_test_file(rel):
            findings += formula_findings(rel, tree)
    findings += definition_findings(trees)
    findings += copy_findings(trees)
    return sorted(set(findings), key=lambda f: (f.path, f.line, f.key))


def constant_findings(rel: str, tree: ast.Module) -> list[Finding]:
    """Listed constants assigned outside their home; listed values written again."""
    out: list[Finding] = []
    test = is_test_file(rel)
    top_level = {id(s) for s in tree.body} | {id(s) for c in tree.body if isinstance(c, ast.ClassDef) for s in c.body}
    for node in ast.walk(tree):
        for name in assigned_names(node):
            constant = canonical_constant(name)
            if constant and CONSTANT_HOMES[constant] != rel:
                out.append(Finding(rel, f"assigns {constant}", node.lineno, f"{name} = …"))
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and (not test or id(node) in top_level):
            value = node.value
            if value is None:
                continue
            for sub in ast.walk(value):
                if isinstance(sub, ast.Constant) and (hit := listed_value(sub.value)):
                    what, constant = hit
                    if CONSTANT_HOMES[constant] != rel:
                        out.append(Finding(rel, f"writes the value of {constant}", sub.lineno, what))
        if not test and isinstance(node, ast.Constant) and (hit := listed_value(node.value)):
            what, constant = hit
            if CONSTANT_HOMES[constant] != rel:
                out.append(Finding(rel, f"writes the value of {constant}", node.lineno, what))
        if not test and is_rotor_kind_collection(node) and rel != CONSTANT_HOMES["ROTOR_KINDS"]:
            out.append(Finding(rel, "writes the value of ROTOR_KINDS", node.lineno, ast.unparse(node)))
    return out


def formula_findings(rel: str, tree: ast.Module) -> list[Finding]:
    """The Gaussian normaliser and scipy's χ² outside the statistics home."""
    if rel == STATS:
        return []
    out: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and call_name(node) == "log" and any(mentions_pi(a) for a in node.args):
            out.append(Finding(rel, "writes log(2π)", node.lineno, ast.unparse(node)))
        if isinstance(node, ast.ImportFrom) and node.module == "scipy.stats":
            if any(alias.name == "chi2" for alias in node.names):
                out.append(Finding(rel, "uses scipy's chi2", node.lineno, "velobins_common.stats has the χ² bounds"))
        if isinstance(node, ast.Attribute) and node.attr == "chi2" and ast.unparse(node.value).endswith("stats"):
            out.append(Finding(rel, "uses scipy's chi2", node.lineno, ast.unparse(node)))
    return out


def definition_findings(trees: dict[str, ast.Module]) -> list[Finding]:
    """A listed formula defined outside its home, or (homeless entries) in more than one file."""
    where: dict[str, list[tuple[str, int]]] = {}
    for rel, tree in trees.items():
        if is_test_file(rel):
            continue
        for fn in tree.body:  # module-level functions: a method of that name delegating to one is no copy
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in FORMULA_NAMES:
                where.setdefault(fn.name, []).append((rel, fn.lineno))
    out: list[Finding] = []
    for name, places in where.items():
        home = FORMULA_NAMES[name]
        files = sorted({rel for rel, _ in places})
        for rel, line in places:
            if home is not None and rel != home:
                out.append(Finding(rel, f"defines {name}", line, f"its home is {home}"))
            elif home is None and len(files) > 1:
                out.append(Finding(rel, f"defines {name}", line, f"also defined in {', '.join(files)}"))
    return out


def large_expressions(fn: ast.AST) -> Iterator[ast.expr]:
    """Expressions in ``fn`` with at least :data:`MIN_COPY_NODES` nodes (a formula, not a call)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.expr) and sum(1 for _ in ast.walk(node)) >= MIN_COPY_NODES:
            yield node


def expression_fingerprint(node: ast.expr) -> str:
    """Structure of one expression, identifiers renamed by first appearance (as :func:`body_fingerprint`)."""
    return ast.dump(_Canon().visit(copy.deepcopy(node)), annotate_fields=False)


def copy_findings(trees: dict[str, ast.Module]) -> list[Finding]:
    """Functions whose body, or a large expression in them, is structurally one of a formula home's."""
    bodies: dict[str, tuple[str, str]] = {}
    exprs: dict[str, tuple[str, str]] = {}
    for rel in FORMULA_FILES:
        for fn in functions(trees.get(rel, ast.Module(body=[], type_ignores=[]))):
            fp = body_fingerprint(fn)
            if fp and fp[1] >= MIN_COPY_NODES:
                bodies.setdefault(fp[0], (rel, fn.name))
            for node in large_expressions(fn):
                exprs.setdefault(expression_fingerprint(node), (rel, fn.name))
    out: list[Finding] = []
    for rel, tree in trees.items():
        if is_test_file(rel):
            continue
        for fn in functions(tree):
            fp = body_fingerprint(fn)
            hits = [bodies[fp[0]]] if fp and fp[0] in bodies else []
            hits += [exprs[e] for e in map(expression_fingerprint, large_expressions(fn)) if e in exprs]
            for home, name in hits:
                if (home, name) != (rel, fn.name):
                    out.append(Finding(rel, f"copies {name}", fn.lineno, f"{fn.name} repeats {home}:{name}"))
    return out


# ----------------------------------------------------------------------------- the tests
def test_each_formula_and_constant_is_written_once() -> None:
    findings = scan(ROOT)
    known = {(f.path, f.key) for f in findings}
    new = [f for f in findings if (f.path, f.key) not in PENDING and (f.path, f.key) not in ALLOWED]
    stale = sorted(k for k in PENDING if k not in known)
    assert not new, "written again (import it from its home instead):\n" + "\n".join(map(str, new))
    assert not stale, f"fixed: remove from PENDING: {stale}"


def test_every_listed_home_exists_and_holds_its_definition() -> None:
    for constant, home in CONSTANT_HOMES.items():
        tree = ast.parse((ROOT / home).read_text(encoding="utf-8"))
        names = {n for node in tree.body for n in assigned_names(node)}
        assert constant in names, f"{home} should define {constant}"
    for name, home in FORMULA_NAMES.items():
        if home is None or name in ("quat_to_matrix", "matrix_to_quat", "quat_to_rot", "rot_to_quat"):
            continue
        tree = ast.parse((ROOT / home).read_text(encoding="utf-8"))
        assert name in {fn.name for fn in functions(tree)}, f"{home} should define {name}"


PLANTED_SOURCE = """
import math
from scipy.stats import chi2

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_GRAVITY = 9.80665
_QUAT_NORM_TOL = 1e-3
KINDS = ("rpm", "pwm")


def nees(e, c):
    return e @ c @ e


def bounds():
    return chi2.ppf(0.025, 3), 9.348


def rot_of(quat):
    a, b, c, d = quat / abs(quat)
    return [
        [1 - 2 * (b * b + c * c), 2 * (a * b - c * d), 2 * (a * c + b * d)],
        [2 * (a * b + c * d), 1 - 2 * (a * a + c * c), 2 * (b * c - a * d)],
        [2 * (a * c - b * d), 2 * (b * c + a * d), 1 - 2 * (a * a + b * b)],
    ]
"""

PLANTED_TEST = """
import pytest

GRAVITY = 9.80665


def test_value():
    assert 9.80665 == pytest.approx(9.80665)  # comparing with the number is what a test does
    local = 9.80665  # a value inside a test body is data, not a second definition
"""


def test_the_scan_finds_planted_copies(tmp_path: Path) -> None:
    for home in (STATS, FRAMES, f"{COMMON}/constants.py"):
        (tmp_path / home).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / home).write_text((ROOT / home).read_text(encoding="utf-8"), encoding="utf-8")
    assert scan(tmp_path) == [], "the homes alone hold each definition once"
    planted = tmp_path / "velobins_x" / "velobins_x" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text(PLANTED_SOURCE, encoding="utf-8")
    fixture = tmp_path / "velobins_x" / "test" / "fixtures.py"
    fixture.parent.mkdir(parents=True)
    fixture.write_text(PLANTED_TEST, encoding="utf-8")
    for ignored in ("build", "install", ".venv"):
        (tmp_path / ignored).mkdir()
        (tmp_path / ignored / "copy.py").write_text("STANDARD_GRAVITY = 9.80665\n", encoding="utf-8")
    found = {(f.path, f.key) for f in scan(tmp_path)}
    src, test = "velobins_x/velobins_x/planted.py", "velobins_x/test/fixtures.py"
    expected = {
        (src, "assigns HALF_LOG_2PI"),
        (src, "writes log(2π)"),
        (src, "uses scipy's chi2"),
        (src, "assigns STANDARD_GRAVITY"),
        (src, "writes the value of STANDARD_GRAVITY"),
        (src, "assigns UNIT_QUATERNION_TOLERANCE"),
        (src, "writes the value of ROTOR_KINDS"),
        (src, "defines nees"),
        (src, "writes the value of NEES_BOUNDS"),
        (src, "copies quaternion_to_matrix"),
        (test, "assigns STANDARD_GRAVITY"),
        (test, "writes the value of STANDARD_GRAVITY"),
    }
    assert found == expected, f"missing {sorted(expected - found)}, unexpected {sorted(found - expected)}"


@pytest.mark.parametrize(
    ("name", "constant"),
    [
        ("_HALF_LOG_2PI", "HALF_LOG_2PI"),
        ("_QUAT_NORM_TOL", "UNIT_QUATERNION_TOLERANCE"),
        ("GRAVITY", "STANDARD_GRAVITY"),
    ],
)
def test_renamed_constants_are_recognised(name: str, constant: str) -> None:
    assert canonical_constant(name) == constant
    assert canonical_constant("gravity") is None  # a config field of that name is a parameter, not the constant
