"""velobins_data.datasets.tabular: the table reader and the row policies every adapter shares."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from velobins_data.datasets.errors import DatasetError
from velobins_data.datasets.tabular import (
    FOLDER_HINT,
    MAX_DROPPED_STAMP_FRACTION,
    check_finite,
    monotonic_rows,
    read_table,
    require_columns,
)

TEXT = "# velobins-csv: 2\n# platform: quad\n#  a plain comment\n\nt,x,name\n0.0,1.5,img0.png\n0.1,2.5,img1.png\n"


def test_comments_header_rows_and_string_columns(tmp_path: Path) -> None:
    path = tmp_path / "f.csv"
    path.write_text(TEXT)
    table = read_table(path, string_columns=("name",))
    assert table.comments == {"velobins-csv": "2", "platform": "quad"}
    assert table.columns == ["t", "x", "name"] and len(table) == 2
    np.testing.assert_array_equal(table.get(["x", "t"]), [[1.5, 0.0], [2.5, 0.1]])
    assert np.isnan(table.data[:, 2]).all()  # a string column is there, as NaN, for nobody to use
    with pytest.raises(DatasetError, match="non-finite") as err:
        table.get(["name"])
    assert err.value.field == "name" and err.value.row == 0
    with pytest.raises(DatasetError, match="column missing"):
        table.index("y")


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    path = tmp_path / "f.csv.gz"
    path.write_bytes(gzip.compress(TEXT.encode()))
    assert read_table(path, string_columns=("name",)).comments["platform"] == "quad"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file: no header line"),
        (b"t,x\n", "no data rows after the header"),
        (b"t,x\n0.0,1.0\n0.1\n", "malformed data row"),
        (b"t,x\n0.0,abc\n", "malformed data row"),
        (b"t,x,y\n0.0,1.0\n", "header has 3 columns but rows have 2"),
        (b"t,x\n0.0,\xff\xfe\n", "not UTF-8 text"),
    ],
)
def test_unreadable_tables_are_one_error_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(DatasetError, match=message) as err:
        read_table(path)
    assert str(err.value).startswith(str(path))


def test_missing_folder_and_truncated_gzip(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such file"):
        read_table(tmp_path / "none.csv")
    with pytest.raises(DatasetError) as err:
        read_table(tmp_path)
    assert FOLDER_HINT in str(err.value)
    truncated = tmp_path / "t.csv.gz"
    truncated.write_bytes(gzip.compress(TEXT.encode() * 50)[:40])
    with pytest.raises(DatasetError, match="truncated or corrupt gzip"):
        read_table(truncated)


def test_require_columns_lists_every_missing_column() -> None:
    require_columns("f.csv", ["t", "x"], ["t"])
    with pytest.raises(DatasetError, match=r"missing columns \['y', 'z'\]; expected header: t,x,y,z") as err:
        require_columns("f.csv", ["t", "x"], ["t", "y", "z"], expected_header="t,x,y,z")
    assert err.value.field == "y"


def test_check_finite_names_the_column_and_first_row() -> None:
    arr = np.zeros((5, 2))
    check_finite("f.csv", ["a", "b"], arr)
    arr[3, 1], arr[4, 0] = np.inf, np.nan
    with pytest.raises(DatasetError) as err:
        check_finite("f.csv", ["a", "b"], arr)
    assert (err.value.field, err.value.row) == ("b", 3)


def test_monotonic_rows_drops_a_few_repeats_and_refuses_a_scrambled_log() -> None:
    t = np.arange(300) * 0.01
    t[[100, 200]] = t[[99, 150]]  # one exact duplicate, one jump back: 2 of 300 rows (< 1 %)
    keep = monotonic_rows("f.csv", t)
    assert len(keep) == 298 and 100 not in keep and 200 not in keep and np.all(np.diff(t[keep]) > 0)
    scrambled = t.copy()
    n_bad = int(MAX_DROPPED_STAMP_FRACTION * len(t)) + 2
    scrambled[10 : 10 + n_bad] = 0.0
    with pytest.raises(DatasetError, match="timestamps not sorted") as err:
        monotonic_rows("f.csv", scrambled, column="stamp")
    assert (err.value.field, err.value.row) == ("stamp", 10)
    with pytest.raises(DatasetError, match="at least 2 rows"):
        monotonic_rows("f.csv", np.zeros(1))
