"""Each formula of the paper is written in exactly one function of the package (issue 14).

For every formula the table names the one function that defines it and a pattern of its
expression; the test scans every production module of ``velobins_net`` and fails when the
pattern appears anywhere else (a second copy) or nowhere (the table is stale). The accelerator
layer's native kernel is a backend of :func:`velobins_net.bins.decode_queries`, in C++, and is
held to it by ``test_native.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import velobins_net

PACKAGE = Path(velobins_net.__file__).resolve().parent

FORMULAS = {
    "eq:decode  v = sum_n pi_n b_n": (r"probs @ centres|\b\w+ @ u\b", "bins.py", "expected_velocity"),
    "eq:bin_variance  sum_n pi_n (b_n - v)^2": (r"\.square\(\)\)\.sum\(-1\)|\(dev \* dev\)", "bins.py", "bin_variance"),
    "eq:softmax  logits theta_i(h) . phi(enc(b_n))": (r"@ \w*\.?features_t|mm\(queries", "bins.py", "decode_queries"),
    "eq:spe  SPE(b) = sin(gamma * PE(b))": (r"sin\(\w*\.?gamma \*", "decoders.py", "learnable_sine_encoding"),
    "covariance decoder  exp(2 log sigma)": (r"exp\(2\.0 \* log_sigma\)", "decoders.py", "covariance_variance"),
    "reported variance by source (B, C, B+C)": (r'source == "C"|== "B\+C"', "decoders.py", "reported_variance"),
    "eq:target  Gaussian bin mass": (r"special\.erfc", "labels.py", "gaussian_bin_mass"),
    "eq:tilt  exponential tilt to the mean": (r"eta\.unsqueeze\(-1\) \* u", "labels.py", "tilt_to_mean"),
    "eq:huber": (r"F\.huber_loss", "losses.py", "huber_loss"),
    "eq:kl  KL(q || pi)": (r"log_q - log_pi", "losses.py", "kl_loss"),
}


def _function_at(tree: ast.Module, line: int) -> str | None:
    """Name of the innermost function whose body spans ``line``."""
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno > best.lineno:
                best = node
    return None if best is None else best.name


def _docstring_lines(tree: ast.Module) -> set[int]:
    """Lines of string-only statements (docstrings), which may quote a formula."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _occurrences(pattern: str) -> list[tuple[str, str | None, int]]:
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        docs = _docstring_lines(tree)
        for i, line in enumerate(text.splitlines(), start=1):
            code = line.split("#", 1)[0]
            if i not in docs and re.search(pattern, code):
                hits.append((str(path.relative_to(PACKAGE)), _function_at(tree, i), i))
    return hits


@pytest.mark.parametrize("formula", list(FORMULAS))
def test_formula_is_defined_in_exactly_one_function(formula):
    pattern, module, function = FORMULAS[formula]
    hits = _occurrences(pattern)
    assert hits, f"{formula}: pattern {pattern!r} found nowhere; update the table"
    places = {(m, f) for m, f, _ in hits}
    assert places == {(module, function)}, f"{formula}: written in {sorted(hits)}, expected only {module}:{function}"
