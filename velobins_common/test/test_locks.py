"""The run lock is never followed through a link (issue 24: a planted link made root overwrite any file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from velobins_common.locks import LOCK_NAME, RunLock
from velobins_common.outputs import OutputError, RunLayout, open_run_dir

PLANTS = {
    "symlink": lambda lock, victim: lock.symlink_to(victim),
    "dangling symlink": lambda lock, victim: lock.symlink_to(victim.parent / "not-yet"),
    "hard link": lambda lock, victim: os.link(victim, lock),
    "fifo": lambda lock, victim: os.mkfifo(lock),
    "folder": lambda lock, victim: lock.mkdir(),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_lock_is_refused_and_its_target_untouched(tmp_path: Path, plant: str) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    victim = tmp_path / "outside" / "passwd"
    victim.parent.mkdir()
    victim.write_text("root:x:0:0\n")
    PLANTS[plant](out / LOCK_NAME, victim)
    with pytest.raises(OutputError, match=r"\.velobins\.lock: .*(symbolic link|not a regular file|hard links)"):
        open_run_dir(out, RunLayout("evaluate", ("metrics.json",)))
    assert victim.read_text() == "root:x:0:0\n"
    assert not (victim.parent / "not-yet").exists()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing else made


def test_a_plain_lock_names_its_holder_and_goes_with_it(tmp_path: Path) -> None:
    with RunLock(tmp_path, "train"):
        assert (tmp_path / LOCK_NAME).read_text().startswith("velobins train (pid ")
        with pytest.raises(OutputError, match="in use by velobins train"):
            RunLock(tmp_path, "evaluate")
    assert not (tmp_path / LOCK_NAME).exists()
