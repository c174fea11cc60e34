"""Untrusted files are read within bounds (issue 24): size on disk, decompressed size, YAML aliases and depth."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from velobins_common.bounded import MAX_YAML_DEPTH, InputLimitError, load_yaml, read_text, read_yaml


def test_a_sparse_file_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    with open(path, "wb") as fh:
        fh.truncate(2 << 30)  # 2 GiB of holes: no disk used
    start = time.process_time()
    with pytest.raises(InputLimitError, match=r"huge\.csv: file is 2048 MiB, more than the 1 MiB limit"):
        read_text(path, 1 << 20, "flight file")
    assert time.process_time() - start < 1.0  # refused from its size, not after reading it


def test_a_gzip_bomb_is_refused_while_it_inflates(tmp_path: Path) -> None:
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for _ in range(64):
            fh.write(b"\0" * (1 << 20))  # 64 MiB of zeros in about 64 kB
    assert path.stat().st_size < 1 << 20
    with pytest.raises(InputLimitError, match=r"bomb\.csv\.gz: flight file \(decompressed\) holds more than 4 MiB"):
        read_text(path, 4 << 20, "flight file")


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    for name, opener in (("a.csv", open), ("a.csv.gz", gzip.open)):
        with opener(tmp_path / name, "wb") as fh:
            fh.write("\ufefft,acc_x\n1,2\n".encode())
        assert read_text(tmp_path / name, 1 << 20).startswith("t,acc_x")


def test_yaml_aliases_are_refused_and_nesting_is_bounded(tmp_path: Path) -> None:
    laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for level in "bcdefghi":
        prev = chr(ord(level) - 1)
        laughs += f"{level}: &{level} [{', '.join(['*' + prev] * 9)}]\n"
    path = tmp_path / "B1_metadata.yaml"
    path.write_text(laughs)
    with pytest.raises(InputLimitError, match=r"B1_metadata\.yaml: aliases \(\*name\) are not allowed .*line 2"):
        read_yaml(path)
    deep = "x: " + "[" * (MAX_YAML_DEPTH + 5) + "]" * (MAX_YAML_DEPTH + 5)
    with pytest.raises(InputLimitError, match=f"deeper than {MAX_YAML_DEPTH} levels"):
        load_yaml(deep, "deep.yaml")
    params = "/**/velobins_ekf:\n  ros__parameters:\n    filter:\n      acc_noise_density: 0.1\n"
    assert load_yaml(params, "ok.yaml") == {
        "/**/velobins_ekf": {"ros__parameters": {"filter": {"acc_noise_density": 0.1}}}
    }
    with pytest.raises(InputLimitError, match="YAML of 5 MiB exceeds the 4 MiB limit"):
        load_yaml("#" * (5 << 20), "big.yaml")
