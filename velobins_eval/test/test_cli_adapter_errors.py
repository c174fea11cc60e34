"""Damaged flight files: one DatasetError naming the file (and key), one CLI line, exit 2 (issue 13).

Table-driven: each case damages a small fixture flight the way a download, a full disk or a
hand edit does (truncated or corrupt gzip, binary bytes, broken metadata YAML, corrupt HDF5 or
mcap, a directory or a missing path where a flight file is expected). Every case is checked
twice: ``load_flight`` raises :class:`DatasetError` whose message names the file (and the key
where one is at fault), and ``velobins convert`` on it exits 2 with one error line naming the
file, no traceback, nothing written at ``--output`` and nothing that existed before modified.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fixtures_datasets as fx

from velobins_data.datasets import DatasetError, load_flight
from velobins_eval.cli import main

NANOBENCH = "B2_circle_fast_rep1.csv.gz"
NANOBENCH_YAML = "B2_circle_fast_rep1_metadata.yaml"


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: bytes and mtime, to prove nothing was modified."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def damaged_bytes(data: bytes, start: int, length: int) -> bytes:
    """``data`` with ``length`` deterministic pseudo-random bytes written at ``start``."""
    noise = np.random.default_rng(0).integers(0, 256, length, dtype=np.uint8).tobytes()
    return data[:start] + noise + data[start + length :]


# ------------------------------------------------------------------------------ damaged inputs
def nanobench(tmp: Path) -> Path:
    return fx.write_nanobench(tmp / NANOBENCH, fx.hover())


def truncated_gz(tmp: Path) -> Path:
    path = nanobench(tmp)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def bad_crc_gz(tmp: Path) -> Path:
    path = nanobench(tmp)
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # the CRC32 in the gzip trailer
    path.write_bytes(bytes(data))
    return path


def corrupt_deflate_gz(tmp: Path) -> Path:
    path = nanobench(tmp)
    data = path.read_bytes()
    path.write_bytes(damaged_bytes(data, 40, 64))
    return path


def not_gzip(tmp: Path) -> Path:
    path = nanobench(tmp)
    path.write_bytes(b"t,px,py\n1,2,3\n")  # a plain CSV named .csv.gz
    return path


def binary_csv(tmp: Path) -> Path:
    path = tmp / "my_flight.csv"
    path.write_bytes(gzip.compress(b"t,acc_x\n0.0,1.0\n" * 50))  # compressed but named .csv
    return path


def latin1_tiiratm(tmp: Path) -> Path:
    path = fx.write_tiiratm(tmp / "flight-01a-ellipse_500hz_freq_sync.csv", fx.hover())
    text = path.read_bytes().replace(b"img_00003.jpg", "img_é.jpg".encode("latin-1"))
    path.write_bytes(text)
    return path


def truncated_neurobem(tmp: Path) -> Path:
    path = fx.write_neurobem(tmp / "merged_2021-02-03.csv.gz", fx.hover())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    return path


def yaml_text(text: str) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        path = nanobench(tmp)
        (tmp / NANOBENCH_YAML).write_text(text)
        return path

    return build


def hdf5(tmp: Path) -> Path:
    return fx.write_aiio_hdf5(tmp / "data.hdf5", fx.hover())


def truncated_hdf5(tmp: Path) -> Path:
    path = hdf5(tmp)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def garbage_hdf5(tmp: Path) -> Path:
    path = tmp / "data.hdf5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)
    return path


def hdf5_group_for_dataset(tmp: Path) -> Path:
    import h5py

    path = hdf5(tmp)
    with h5py.File(path, "a") as f:
        del f["rotor_spd"]
        f.create_group("rotor_spd")
    return path


def hdf5_strings(tmp: Path) -> Path:
    import h5py

    path = hdf5(tmp)
    with h5py.File(path, "a") as f:
        del f["ts"]
        f.create_dataset("ts", data=np.array([b"noon"] * 400))
    return path


def mcap_bag(tmp: Path) -> Path:
    return fx.write_aiio_mcap(tmp / "bag", fx.hover(n=200))


def truncated_mcap(tmp: Path) -> Path:
    bag = mcap_bag(tmp)
    storage = next(bag.glob("*.mcap"))
    data = storage.read_bytes()
    storage.write_bytes(data[: len(data) // 2])
    return bag


def corrupt_mcap(tmp: Path) -> Path:
    bag = mcap_bag(tmp)
    storage = next(bag.glob("*.mcap"))
    data = storage.read_bytes()
    storage.write_bytes(damaged_bytes(data, len(data) // 2, 3000))
    return bag


def broken_bag_metadata(tmp: Path) -> Path:
    bag = mcap_bag(tmp)
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [\n")
    return bag


def a_folder(tmp: Path) -> Path:
    folder = tmp / "flights"
    folder.mkdir()
    fx.write_neurobem(folder / "one.csv", fx.hover())
    return folder


def missing(tmp: Path) -> Path:
    return tmp / "no_such_flight.csv"


@dataclass
class Case:
    """A damaged input of ``kind``; the error must name every string of ``names``."""

    name: str
    kind: str
    build: Callable[[Path], Path]
    names: tuple[str, ...]


CASES = [
    Case("truncated .csv.gz", "nanobench", truncated_gz, (NANOBENCH, "truncated or corrupt gzip", "EOFError")),
    Case("gzip with a bad CRC", "nanobench", bad_crc_gz, (NANOBENCH, "truncated or corrupt gzip")),
    Case("corrupt deflate stream", "nanobench", corrupt_deflate_gz, (NANOBENCH, "cannot read")),
    Case("plain text named .gz", "nanobench", not_gzip, (NANOBENCH, "truncated or corrupt gzip", "BadGzipFile")),
    Case("compressed bytes named .csv", "csv", binary_csv, ("my_flight.csv", "not UTF-8")),
    Case("latin-1 byte in a TII-RATM CSV", "tiiratm", latin1_tiiratm, ("_500hz_freq_sync.csv", "UTF-8")),
    Case("truncated NeuroBEM .csv.gz", "neurobem", truncated_neurobem, ("merged_2021-02-03.csv.gz", "gzip")),
    Case("invalid metadata YAML", "nanobench", yaml_text("gravity: [9.8\n"), (NANOBENCH_YAML, "invalid YAML")),
    Case("metadata YAML is a list", "nanobench", yaml_text("- 1\n- 2\n"), (NANOBENCH_YAML, "not a mapping")),
    Case("gravity is text", "nanobench", yaml_text("gravity: abc\n"), (NANOBENCH_YAML, "'gravity'", "number")),
    Case("gravity is a list", "nanobench", yaml_text("gravity: [9.8]\n"), (NANOBENCH_YAML, "'gravity'")),
    Case("gravity negative", "nanobench", yaml_text("gravity: -9.81\n"), (NANOBENCH_YAML, "'gravity'")),
    Case(
        "python tag in YAML (safe_load refuses it)",
        "nanobench",
        yaml_text("gravity: !!python/object/apply:os.getcwd []\n"),
        (NANOBENCH_YAML, "invalid YAML"),
    ),
    Case("truncated HDF5", "aiio", truncated_hdf5, ("data.hdf5", "cannot read")),
    Case("garbage HDF5", "aiio", garbage_hdf5, ("data.hdf5", "cannot read")),
    Case("HDF5 group where a dataset belongs", "aiio", hdf5_group_for_dataset, ("data.hdf5", "'rotor_spd'")),
    Case("HDF5 stamps are strings", "aiio", hdf5_strings, ("data.hdf5", "'ts'", "not numeric")),
    Case("truncated mcap", "aiio", truncated_mcap, ("bag", "ROS 2 bag")),
    Case("mcap overwritten in the middle", "aiio", corrupt_mcap, ("bag", "corrupt bag")),
    Case("bag metadata.yaml broken", "aiio", broken_bag_metadata, ("bag", "metadata.yaml")),
    Case("a folder as a CSV flight", "csv", a_folder, ("flights", "is a directory", "velobins check")),
    Case("a folder as a NanoBench flight", "nanobench", a_folder, ("flights", "is a directory")),
    Case("a folder as a NeuroBEM flight", "neurobem", a_folder, ("flights", "is a directory")),
    Case("a folder as a TII-RATM flight", "tiiratm", a_folder, ("flights", "is a directory")),
    Case("a folder that is not a bag (AI-IO)", "aiio", a_folder, ("flights", "not a ROS 2 bag")),
    Case("missing flight file", "csv", missing, ("no_such_flight.csv", "no such file")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_load_sequence_names_the_damaged_file(case: Case, tmp_path: Path) -> None:
    path = case.build(tmp_path)
    with pytest.raises(DatasetError) as err:
        load_flight(case.kind, path)
    message = str(err.value)
    assert "\n" not in message, message
    for name in case.names:
        assert name in message, f"{case.name}: {name!r} not in {message!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_convert_fails_with_one_line_and_writes_nothing(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = case.build(tmp_path)
    before = snapshot(tmp_path)
    out = tmp_path / "out_bag"
    status = main(["convert", "--dataset", case.kind, "--input", str(path), "--output", str(out)])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], captured.err
    for name in case.names[:1]:
        assert name in lines[0], f"{case.name}: {name!r} not in {lines[0]!r}"
    assert not out.exists()
    assert snapshot(tmp_path) == before  # no temporary files, nothing modified


def test_folder_of_flights_names_the_one_damaged_file(tmp_path: Path) -> None:
    """In a folder of many flights the error says which file is broken (the issue's complaint)."""
    from velobins_data.datasets import load_directory

    for i in range(6):
        fx.write_nanobench(tmp_path / f"B{i}_circle_rep1.csv.gz", fx.hover())
    broken = tmp_path / "B3_circle_rep1.csv.gz"
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) - 40])
    with pytest.raises(DatasetError, match=r"B3_circle_rep1\.csv\.gz.*truncated or corrupt gzip"):
        load_directory("nanobench", tmp_path)


def test_metadata_gravity_is_used_when_valid(tmp_path: Path) -> None:
    path = yaml_text("gravity: 9.79\ntrajectory_type: circle\n")(tmp_path)
    flight = load_flight("nanobench", path)
    assert flight.gravity == pytest.approx(9.79)
    np.testing.assert_allclose(np.median(flight.acc[:, 2]), 9.79, rtol=1e-3)  # file: +1 g on z
