"""``velobins check``: the dataset doctor's options and table (its work is :mod:`velobins_data.doctor`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from velobins_common.errors import UserError, one_line
from velobins_common.output_files import OutputTarget, check_output_file, write_output_file
from velobins_data.datasets import flight_files
from velobins_data.doctor import check_path, format_table, json_report, summary
from velobins_data.validate import CHECKS

from .options import add_allow_option, add_dataset_option, add_output_file_option, add_overwrite_option


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
    add_output_file_option(p, "--json", "also write every statistic and finding as JSON")
    add_overwrite_option(p, "an existing --json file")
    return p


def check_json_target(args: argparse.Namespace) -> OutputTarget | None:
    """The checked ``--json`` target, before any flight is read: an existing file only with
    ``--overwrite``, never one of the flights being checked, special files written directly."""
    if args.json is None:
        return None
    target = check_output_file(args.json, args.overwrite, "--json")
    if target.kind == "file" and args.json.exists():
        for flight in flight_files(args.dataset, args.data):
            if os.path.samefile(flight, args.json):
                raise UserError(f"{args.json}: --json names a flight file being checked; choose another file")
    return target


def main_check(argv: list[str] | None = None) -> int:
    """Entry point: 0 no flight fails, 1 a flight fails or none is usable, 2 usage error."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return int(exc.code or 0)
    try:
        target = check_json_target(args)  # before the check: a refused --json costs nothing
        reports = check_path(args.dataset, args.data, args.allow, progress=True)
        # The table goes to stderr when the JSON goes to stdout, so a pipe gets JSON only.
        out = sys.stderr if target is not None and target.descriptor == 1 else sys.stdout
        print(format_table(reports), file=out)
        counts = summary(reports)
        usable = counts["ok"] + counts["allowed"]
        parts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        print(f"\n{len(reports)} flight(s): {parts}", file=out)
        if target is not None:
            write_output_file(target, json_report(args.dataset, args.data, args.allow, reports))
    except UserError as exc:  # DatasetError, OutputError too: missing path, no flight files; unknown check name
        text = one_line(str(exc).replace("field '<file>': ", ""))
        print(f"velobins check: error: {text}", file=sys.stderr)
        return 2
    if counts["FAIL"]:
        if any(r.verdict == "FAIL" and r.inspection is not None for r in reports):
            print(f"fix the files, or accept a failing check with --allow NAME ({', '.join(CHECKS)})", file=out)
        return 1
    if usable == 0:
        print("no usable flight", file=out)
        return 1
    return 0
