"""Output file options (issue 24): existing files refused, special files written directly, links refused.

The special-file cases run as root in a private mount namespace where the machine allows one
(``unshare --mount``): a fresh ``/dev`` there holds a real ``/dev/null`` and ``/dev/stdout`` that a
rename-over bug would replace, without touching the host's. Elsewhere a named pipe and a
``/dev/null``-like device node in a temporary folder stand in for them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from velobins_common.output_files import check_output_file, staged_output, write_output_file
from velobins_common.outputs import OutputError


def test_an_existing_file_is_refused_unless_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("mine")
    with pytest.raises(OutputError, match=r"report\.json: --json: already exists; pass --overwrite"):
        check_output_file(path, False, "--json")
    assert path.read_text() == "mine"
    write_output_file(check_output_file(path, True, "--json"), "new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_to_a_file_is_refused_even_with_overwrite(tmp_path: Path, overwrite: bool) -> None:
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("keep")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    with pytest.raises(OutputError, match=r"symbolic link .* name the file itself"):
        check_output_file(link, overwrite, "--json")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match="dangling symbolic link"):
        check_output_file(tmp_path / "dangling.json", overwrite, "--json")
    assert victim.read_text() == "keep" and link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_folders_and_parents_that_are_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="--out: is a folder"):
        check_output_file(tmp_path, True, "--out")
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"--out: cannot create it: .*f is a file, not a folder"):
        check_output_file(tmp_path / "f" / "x.yaml", False, "--out")
    target = check_output_file(tmp_path / "new" / "deeper" / "x.yaml", False, "--out")
    with pytest.raises(RuntimeError), staged_output(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the export failed")
    assert not (tmp_path / "new").exists()  # the folders it would have made are gone again


def test_a_named_pipe_receives_the_content_and_stays_a_pipe(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output_file(check_output_file(fifo, False, "--json"), '{"ok": true}\n')
    reader.join(timeout=30)
    assert got == [b'{"ok": true}\n'] and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file beside it


def _mknod(path: Path, major: int, minor: int) -> None:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")


def test_a_null_device_is_written_directly_and_other_devices_refused(tmp_path: Path) -> None:
    null = tmp_path / "null"
    _mknod(null, 1, 3)  # what /dev/null is
    for _ in range(2):  # with and without --overwrite alike
        write_output_file(check_output_file(null, False, "--json"), "x" * 100)
        info = null.lstat()
        assert stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == (1, 3)
    full = tmp_path / "full"
    _mknod(full, 1, 7)  # /dev/full: a device that is neither a pipe, a terminal nor null
    with pytest.raises(OutputError, match="is a device or socket"):
        check_output_file(full, True, "--json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]


def test_dash_and_dev_stdout_write_to_the_descriptor(tmp_path: Path) -> None:
    code = (
        "import sys; from velobins_common.output_files import check_output_file, write_output_file;"
        "print('table first', flush=True);"
        "[write_output_file(check_output_file(a, False, '--json'), a + '\\n') for a in sys.argv[1:]]"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "-", "/dev/stdout", "/dev/fd/1"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "table first\n-\n/dev/stdout\n/dev/fd/1\n"


NAMESPACE_SCRIPT = r"""
set -e
mount -t tmpfs velobins-test /dev
mknod -m 666 /dev/null c 1 3
ln -s /proc/self/fd/1 /dev/stdout
{py} -c "$CODE" /dev/stdout | cat > {out}/piped.txt
{py} -c "$CODE" /dev/null
{py} -c "$CODE" /dev/null --overwrite
test -c /dev/null && echo null-is-a-device
test -L /dev/stdout && echo stdout-is-a-link
test "$(ls -A /dev | sort | tr '\n' ' ')" = "null stdout " && echo dev-unchanged
"""


def test_dev_null_and_dev_stdout_as_root_in_a_private_mount_namespace(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    probe = subprocess.run([unshare, "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    code = (
        "import sys; from velobins_common.output_files import check_output_file, write_output_file;"
        "write_output_file(check_output_file(sys.argv[1], '--overwrite' in sys.argv, '--json'), '{\"n\": 1}\\n')"
    )
    script = NAMESPACE_SCRIPT.format(py=sys.executable, out=tmp_path)
    res = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"CODE": code},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["null-is-a-device", "stdout-is-a-link", "dev-unchanged"]
    assert (tmp_path / "piped.txt").read_text() == '{"n": 1}\n'
