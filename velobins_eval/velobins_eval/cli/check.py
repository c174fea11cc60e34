"""``velobins check``: the dataset doctor's options and table (its work is :mod:`velobins_data.doctor`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from velobins_data.doctor import check_path, format_table, summary, write_json
from velobins_data.validate import CHECKS

from .options import add_allow_option, add_dataset_option


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """Options of ``velobins check``."""
    names = "\n".join(f"  {name:20s} {text}" for name, text in CHECKS.items())
    p = _Parser(
        prog="velobins check",
        description="Check every flight of a file or folder for physical plausibility (one table row per flight).",
        epilog=f"checks (names for --allow):\n{names}\n\nthresholds and measured ranges: docs/data_formats.md",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_dataset_option(p, "the files")
    p.add_argument("--data", required=True, type=Path, help="one flight file or a folder (searched recursively)")
    add_allow_option(p, "report flights that fail this check as 'allowed' instead of FAIL")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every statistic and finding as JSON")
    return p


def main_check(argv: list[str] | None = None) -> int:
    """Entry point: 0 no flight fails, 1 a flight fails or none is usable, 2 usage error."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return int(exc.code or 0)
    try:
        reports = check_path(args.dataset, args.data, args.allow, progress=True)
    except ValueError as exc:  # DatasetError too: missing path, no flight files; unknown check name
        text = " ".join(str(exc).replace("field '<file>': ", "").split())
        print(f"velobins check: error: {text}", file=sys.stderr)
        return 2
    print(format_table(reports))
    counts = summary(reports)
    usable = counts["ok"] + counts["allowed"]
    parts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    print(f"\n{len(reports)} flight(s): {parts}")
    if args.json is not None:
        write_json(args.json, args.dataset, args.data, args.allow, reports)
    if counts["FAIL"]:
        if any(r.verdict == "FAIL" and r.inspection is not None for r in reports):
            print(f"fix the files, or accept a failing check with --allow NAME ({', '.join(CHECKS)})")
        return 1
    if usable == 0:
        print("no usable flight")
        return 1
    return 0
