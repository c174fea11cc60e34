"""Plain-CSV format (round trip, header checks) and the npz storage / cache."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from fixtures_datasets import imu_noise
from scipy.spatial.transform import Rotation

from velobins_data.datasets import DatasetError, load_flight, read_csv, write_csv
from velobins_data.datasets.csv_format import FORMAT_VERSION as CSV_VERSION
from velobins_data.datasets.csv_format import expected_header
from velobins_data.flight import Flight, FlightError
from velobins_data.storage import cache_path, load_cached, load_flight_file, save_flight


def _seq(n: int = 300, k: int = 6, kind: str = "speed") -> Flight:
    rng = np.random.default_rng(1)
    t = 5.0 + np.arange(n) * 0.005 + rng.uniform(0, 1e-4, n)
    q = Rotation.from_rotvec(rng.normal(0, 0.3, (n, 3))).as_quat()
    rotor = rng.uniform(0, 1, (n, k)) * (1.0 if kind == "command" else 2000.0)
    return Flight(
        name="my_flight",
        t=t,
        acc=rng.normal(0, 1, (n, 3)) + np.array([0.0, 0.0, 9.81]),
        gyro=rng.normal(0, 1, (n, 3)),
        rotor=rotor,
        rotor_kind=kind,
        p=rng.normal(0, 1, (n, 3)),
        q=q,
        v=rng.normal(0, 1, (n, 3)),
        metadata={"platform": "hexa", "gravity": 9.79, "dataset": "sim"},
    )


def _hover(n: int = 400) -> Flight:
    """A physically plausible flight (hover at 1 m, 100 Hz), so load_flight's checks pass."""
    t = 1000.0 + np.arange(n) * 0.01
    acc, gyro = imu_noise(np.tile([0.0, 0.0, 9.80665], (n, 1)), np.zeros((n, 3)))
    return Flight(
        name="hover",
        t=t,
        acc=acc,
        gyro=gyro,
        rotor=np.full((n, 4), 0.6),
        rotor_kind="command",
        p=np.tile([0.0, 0.0, 1.0], (n, 1)),
        q=np.tile([0.0, 0.0, 0.0, 1.0], (n, 1)),
        v=np.zeros((n, 3)),
        metadata={"platform": "quad", "dataset": "sim"},
    )


@pytest.mark.parametrize("kind", ["speed", "command"])
def test_csv_round_trip_is_exact(kind: str, tmp_path: Path) -> None:
    flight = _seq(kind=kind)
    path = tmp_path / "my_flight.csv"
    write_csv(flight, path)
    back = read_csv(path)
    assert back.name == "my_flight" and back.rotor_kind == kind and back.num_rotors == 6
    for f in ("t", "acc", "gyro", "rotor", "p", "q", "v"):
        np.testing.assert_array_equal(getattr(back, f), getattr(flight, f))
    assert back.gravity == 9.79 and back.metadata["platform"] == "hexa" and back.metadata["dataset"] == "sim"
    # Random data is no physical flight: dispatch only, without load_flight's plausibility checks.
    assert load_flight("csv", path, validate=False).num_rotors == 6


def test_csv_header_error_lists_missing_and_unknown_and_shows_expected(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    write_csv(_seq(k=4), path)
    text = path.read_text().replace("gyro_z", "gyro_zz").replace(",v_y", ",vy")
    path.write_text(text)
    with pytest.raises(DatasetError) as err:
        read_csv(path)
    msg = str(err.value)
    assert "bad.csv" in msg and "['gyro_z', 'v_y']" in msg and "['gyro_zz', 'vy']" in msg
    assert expected_header("speed", 4) in msg


def test_csv_rotor_count_comment_must_match(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    write_csv(_seq(k=4), path)
    path.write_text(path.read_text().replace("# rotors: 4", "# rotors: 6"))
    with pytest.raises(DatasetError, match="rotors: 6"):
        read_csv(path)


@pytest.mark.parametrize("how", ["nan", "unsorted", "empty", "mixed_kind", "gap"])
def test_csv_malformed(how: str, tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    write_csv(_seq(k=4), path)
    lines = path.read_text().splitlines()
    first_data = next(i for i, line in enumerate(lines) if not line.startswith("#")) + 1
    if how == "nan":
        cells = lines[first_data + 7].split(",")
        cells[3] = "nan"
        lines[first_data + 7] = ",".join(cells)
    elif how == "unsorted":
        lines[first_data + 3], lines[first_data + 4] = lines[first_data + 4], lines[first_data + 3]
    elif how == "empty":
        lines = []
    elif how == "mixed_kind":
        lines[first_data - 1] = lines[first_data - 1].replace("speed_2", "command_2")
    elif how == "gap":
        lines[first_data - 1] = lines[first_data - 1].replace("speed_3", "speed_7")
    path.write_text("\n".join(lines) + "\n")
    expected = {"nan": "acc_z", "unsorted": "strictly increasing", "empty": "empty", "mixed_kind": "mix"}
    expected["gap"] = "without gaps"
    with pytest.raises(DatasetError, match=expected[how]) as err:
        read_csv(path)
    assert "m.csv" in str(err.value)
    if how == "nan":
        assert err.value.row == 7


def test_csv_writes_version_2_with_named_rotor_columns(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    write_csv(_seq(k=4, kind="command"), path)
    lines = path.read_text().splitlines()
    assert lines[0] == f"# velobins-csv: {CSV_VERSION}" and CSV_VERSION == "2"
    assert "command_1,command_2,command_3,command_4" in next(ln for ln in lines if ln.startswith("t,"))


@pytest.mark.parametrize(("prefix", "kind", "value"), [("rpm", "speed", 1800.0), ("pwm", "command", 0.55)])
def test_csv_version_1_with_the_old_rotor_columns_is_read(tmp_path: Path, prefix: str, kind: str, value: float) -> None:
    # A file in the layout written before issue 22, by hand: rpm_ held rad/s, pwm_ a [0, 1] command.
    rotor_cols = ",".join(f"{prefix}_{i}" for i in range(1, 5))
    header = f"t,acc_x,acc_y,acc_z,gyro_x,gyro_y,gyro_z,{rotor_cols},p_x,p_y,p_z,q_x,q_y,q_z,q_w,v_x,v_y,v_z"
    rows = [f"{0.01 * i:.2f},0,0,9.81,0,0,0,{value},{value},{value},{value},0,0,1,0,0,0,1,0,0,0" for i in range(30)]
    path = tmp_path / "old.csv"
    path.write_text("\n".join(["# velobins-csv: 1", "# rotors: 4", header, *rows]) + "\n")
    flight = read_csv(path)
    assert flight.rotor_kind == kind and flight.num_rotors == 4 and np.all(flight.rotor == value)
    write_csv(flight, tmp_path / "new.csv")  # and written again in today's layout, the same data
    again = read_csv(tmp_path / "new.csv")
    assert again.rotor_kind == kind and np.array_equal(again.rotor, flight.rotor)


def test_csv_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.csv"
    write_csv(_seq(k=4), path)
    path.write_text(path.read_text().replace("# velobins-csv: 2", "# velobins-csv: 9"))
    with pytest.raises(DatasetError, match="format version '9'") as err:
        read_csv(path)
    assert "future.csv" in str(err.value)


def test_npz_version_1_with_the_old_rotor_kind_is_read(tmp_path: Path) -> None:
    flight = _seq(kind="speed")
    old = {f: getattr(flight, f) for f in ("t", "acc", "gyro", "rotor", "p", "q", "v")}
    old |= {"name": np.array("old"), "rotor_kind": np.array("rpm"), "metadata": np.array("{}")}
    np.savez(tmp_path / "old.npz", format_version=np.array(1), **old)  # the layout before issue 22, by hand
    back = load_flight_file(tmp_path / "old.npz")
    assert back.rotor_kind == "speed" and np.array_equal(back.rotor, flight.rotor) and back.name == "old"
    save_flight(back, tmp_path / "new.npz")
    with np.load(tmp_path / "new.npz") as npz:
        assert int(npz["format_version"]) == 2 and str(npz["rotor_kind"]) == "speed"
    np.savez(tmp_path / "future.npz", format_version=np.array(3), **old)
    with pytest.raises(FlightError, match="format_version"):
        load_flight_file(tmp_path / "future.npz")


def test_npz_round_trip(tmp_path: Path) -> None:
    flight = _seq()
    save_flight(flight, tmp_path / "s.npz")
    back = load_flight_file(tmp_path / "s.npz")
    for f in ("t", "acc", "gyro", "rotor", "p", "q", "v"):
        np.testing.assert_array_equal(getattr(back, f), getattr(flight, f))
    assert back.metadata == flight.metadata and back.name == flight.name and back.rotor_kind == flight.rotor_kind


def test_cache_reused_until_source_changes(tmp_path: Path) -> None:
    src = tmp_path / "flight.csv"
    write_csv(_hover(), src)
    cache = tmp_path / "cache"
    first = load_cached("csv", src, cache, load_flight)
    cfile = cache_path("csv", src, cache)
    assert cfile.is_file()
    # Poison the cache's data while keeping its stamp: a reuse must return the poisoned value.
    with np.load(cfile) as npz:
        payload = dict(npz)
    payload["acc"] = payload["acc"] + 1.0
    with open(cfile, "wb") as fh:
        np.savez(fh, **payload)
    reused = load_cached("csv", src, cache, load_flight)
    np.testing.assert_allclose(reused.acc, first.acc + 1.0)
    # Touching the source (new mtime) invalidates the cache: the real data comes back.
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    fresh = load_cached("csv", src, cache, load_flight)
    np.testing.assert_array_equal(fresh.acc, first.acc)


def test_a_cache_holding_bad_data_is_rebuilt_from_the_source(tmp_path: Path) -> None:
    # A cache file whose arrays fail validation (tampered, or written by buggy code) is not the
    # user's problem: it is ignored and rebuilt; only the source file's own errors are raised.
    src = tmp_path / "flight.csv"
    write_csv(_hover(), src)
    cache = tmp_path / "cache"
    first = load_cached("csv", src, cache, load_flight)
    cfile = cache_path("csv", src, cache)
    with np.load(cfile) as npz:
        payload = dict(npz)
    payload["q"] = payload["q"] * 2.0
    with open(cfile, "wb") as fh:
        np.savez(fh, **payload)
    again = load_cached("csv", src, cache, load_flight)
    np.testing.assert_array_equal(again.q, first.q)
    np.testing.assert_array_equal(load_flight_file(cfile).q, first.q)  # the cache was rewritten


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "pickled"])
def test_a_damaged_cache_file_is_rebuilt_never_fatal(tmp_path: Path, damage: str) -> None:
    src = tmp_path / "flight.csv"
    write_csv(_hover(), src)
    cache = tmp_path / "cache"
    first = load_cached("csv", src, cache, load_flight)
    cfile = cache_path("csv", src, cache)
    data = cfile.read_bytes()
    if damage == "truncated":
        cfile.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        cfile.write_bytes(data[:100] + bytes(range(256)) * 4 + data[1124:])
    elif damage == "empty":
        cfile.write_bytes(b"")
    else:  # an object array needs pickle: never loaded (allow_pickle=False)
        with np.load(cfile) as npz:
            payload = dict(npz)
        payload["metadata"] = np.array([{"gravity": 9.8}], dtype=object)
        with open(cfile, "wb") as fh:
            np.savez(fh, **payload)
    with pytest.raises(FlightError, match=cfile.name):
        load_flight_file(cfile)
    again = load_cached("csv", src, cache, load_flight)
    np.testing.assert_array_equal(again.acc, first.acc)
    np.testing.assert_array_equal(load_flight_file(cfile).acc, first.acc)
    assert not [p.name for p in cache.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_load_flights_through_the_cache_reuses_it_and_still_checks_every_flight(tmp_path: Path, monkeypatch) -> None:
    import velobins_data.datasets as datasets

    data, cache = tmp_path / "flights", tmp_path / "cache"
    data.mkdir()
    write_csv(_hover(), data / "hover.csv")
    first = datasets.load_flights("csv", data, cache_dir=cache)
    assert [s.name for s in first.sequences] == ["hover"] and len(list(cache.iterdir())) == 1

    def no_parsing(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setitem(datasets._LOADERS, "csv", no_parsing)
    again = datasets.load_flights("csv", data, cache_dir=cache)
    np.testing.assert_array_equal(again.sequences[0].acc, first.sequences[0].acc)

    monkeypatch.undo()
    in_g = _hover()
    in_g.acc = in_g.acc / 9.80665  # accelerometer in g: the checks run on cached flights too
    write_csv(in_g, data / "hover.csv")
    with pytest.raises(DatasetError, match="in g"):
        datasets.load_flights("csv", data, cache_dir=cache)
