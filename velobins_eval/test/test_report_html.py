"""``report.html`` (velobins_eval.report_html) rendered in headless Chromium: every figure drawn, offline.

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``); without it the rendering test
skips and says so. The page must work offline: plotly.js is embedded, nothing is fetched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from velobins_eval.report_html import table_html

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--enable-unsafe-swiftshader",  # software WebGL for the 3-D figures (no GPU here)
    "--dump-dom",
)
FIGURES_PER_FLIGHT = 5
"""3-D, top view, fused velocity (world), network velocity (body), NEES."""


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def test_the_page_is_self_contained(demo_evaluation: Path) -> None:
    page = (demo_evaluation / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", page)  # nothing loaded from elsewhere
    assert "* plotly.js v" in page.split("</head>")[0]  # the library's banner: plotly.js is inlined in the page
    assert page.count('class="flight"') == 2 and page.count("<table>") == 2 + 2  # aggregate tables + one per flight


def test_headless_chromium_draws_every_figure(demo_evaluation: Path, tmp_path: Path) -> None:
    exe = _chromium()
    if exe is None:
        pytest.skip("Chromium not installed (Debian: apt-get install -y chromium); the HTML report is not rendered")
    proc = subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", (demo_evaluation / "report.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    body = re.sub(r"<script.*?</script>", "", proc.stdout, flags=re.S)  # the DOM after the scripts ran
    figures = re.findall(r'<div id="(fig\d+)" class="plotly-graph-div([^"]*)"', body)
    assert len(figures) == 2 * FIGURES_PER_FLIGHT, figures
    assert all("js-plotly-plot" in cls for _, cls in figures), figures  # plotly drew into each one
    parts = re.split(r'<div id="fig\d+" class="plotly-graph-div', body)[1:]
    for i, part in enumerate(parts):
        assert 'class="main-svg"' in part, f"figure {i + 1} has no drawing"
        assert re.search(r'class="trace', part) or "<canvas" in part, f"figure {i + 1} has no trace"
    three_d = parts[0::FIGURES_PER_FLIGHT]  # each flight's first figure is the 3-D trajectory
    assert all("<canvas" in p for p in three_d) and "WebGL is not supported" not in body
    assert "B2_circle_fast_rep1" in body and "NEES mean" in body and "Filter parameters per row" in body


def test_html_table_cells_and_best_per_column() -> None:
    rows = {"a": {"ate": 0.5, "nees_in_bounds": 0.9}, "b<x>": {"ate": 0.4, "nees_in_bounds": float("nan")}}
    text = table_html(rows, ("ate", "nees_in_bounds"))
    assert "<th>b&lt;x&gt;</th><td><b>0.400</b></td><td>—</td>" in text  # escaped label, best in bold, NaN a dash
    assert "<td>90.0%</td>" in text  # one finite value: nothing to compare, nothing bold
