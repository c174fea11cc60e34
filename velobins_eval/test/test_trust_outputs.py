"""Issue 24, outputs: nothing of the user's is deleted or overwritten, through the real command line.

Each refusal case runs ``velobins`` in-process and checks the exit status, one error line naming the
file and option, no traceback, every pre-existing file byte-identical and no new file anywhere.
The other tests cover what a table cannot: Ctrl-C in the first epoch of ``train --overwrite``, the
replacement after the first checkpoint, a resume that repairs an interrupted save, special files
(a pipe; ``/dev/null`` and ``/dev/stdout`` as root in a private mount namespace) and a full disk.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from velobins_common.outputs import LOCK_NAME, MANIFEST_NAME
from velobins_data.sim.batch import simulate_many
from velobins_eval.cli import main
from velobins_net.checkpoint import read_checkpoint

TINY = (
    "--members",
    "1",
    "--epochs",
    "1",
    "--stride",
    "25",
    "--val-stride",
    "25",
    "--bins",
    "32",
    "--batch-size",
    "64",
    "--no-progress",
)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("good")
    simulate_many("nano", 3, 6.0, 31, root / "flights", workers=1, progress=False)
    assert main(["train", "--dataset", "csv", "--data", str(root / "flights"), *TINY, "--out", str(root / "run")]) == 0
    return {"flights": root / "flights", "flight": sorted((root / "flights").glob("*.csv"))[0], "run": root / "run"}


def files(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``, hidden ones included, with its bytes (None: a folder or link)."""
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
        for p in sorted(root.rglob("*"))
    }


def train_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--dataset", "csv", "--data", str(data), *TINY, "--out", str(out), *extra]


def evaluate_args(good: dict[str, Path], out: Path, *extra: str) -> list[str]:
    ckpt = str(good["run"] / "best.pt")
    return ["evaluate", "--checkpoint", ckpt, "--dataset", "csv", "--data", str(good["flights"]), "--out", str(out)]


def earlier_run(tmp: Path, good: dict[str, Path]) -> Path:
    shutil.copytree(good["run"], tmp / "out")
    (tmp / "out" / "notes.txt").write_text("mine")
    return tmp / "out"


def users_folder(tmp: Path) -> Path:
    """The user's own ``config.json`` and ``plots/figure1.png``: no run of any command."""
    (tmp / "out" / "plots").mkdir(parents=True)
    (tmp / "out" / "config.json").write_text('{"mine": true}')
    (tmp / "out" / "plots" / "figure1.png").write_bytes(b"\x89PNG the user's figure")
    return tmp / "out"


def planted_lock(tmp: Path) -> Path:
    (tmp / "outside").mkdir()
    (tmp / "outside" / "victim").write_text("root:x:0:0\n")
    (tmp / "out").mkdir()
    (tmp / "out" / LOCK_NAME).symlink_to(tmp / "outside" / "victim")
    return tmp / "out"


@dataclass
class Case:
    name: str
    build: Callable[[Path, dict[str, Path]], list[str]]
    names: tuple[str, ...]


CASES = [
    Case(
        "train --overwrite with a typo in --data",
        lambda t, g: train_args(t / "flihgts", earlier_run(t, g), "--overwrite"),
        ("flihgts",),
    ),
    Case(
        "train --overwrite, method options that do not apply",
        lambda t, g: train_args(g["flights"], earlier_run(t, g), "--overwrite", "--method", "tlio"),
        ("--bins", "tlio"),
    ),
    Case(
        "check --json over an existing file",
        lambda t, g: [
            (t / "report.json").write_text("{}") and "check",
            *("--dataset", "csv", "--data", str(g["flights"]), "--json", str(t / "report.json")),
        ],
        ("report.json", "--json", "--overwrite"),
    ),
    Case(
        "check --json over the flight it checks, even with --overwrite",
        lambda t, g: [
            "check",
            "--dataset",
            "csv",
            "--data",
            str(g["flights"]),
            "--json",
            str(g["flight"]),
            "--overwrite",
        ],
        ("sim_circle_000.csv", "--json"),
    ),
    Case(
        "evaluate into the user's config.json and plots/",
        lambda t, g: evaluate_args(g, users_folder(t)),
        ("config.json", "plots", "nothing was changed"),
    ),
    Case(
        "evaluate --overwrite into the user's config.json and plots/",
        lambda t, g: [*evaluate_args(g, users_folder(t)), "--overwrite"],
        ("config.json", "plots", "nothing was changed"),
    ),
    Case(
        "evaluate into an earlier train run", lambda t, g: evaluate_args(g, earlier_run(t, g)), ("holds a train run",)
    ),
    Case("a lock file linked to a file outside", lambda t, g: evaluate_args(g, planted_lock(t)), (LOCK_NAME, "link")),
    Case(
        "a dangling --out symlink",
        lambda t, g: [(t / "out").symlink_to(t / "gone") or "evaluate", *evaluate_args(g, t / "out")[1:]],
        ("out", "dangling symbolic link"),
    ),
    Case(
        "calibrate --out over an existing file",
        lambda t, g: [
            (t / "filter.yaml").write_text("mine") and "calibrate",
            *("--dataset", "csv", "--data", str(g["flight"]), "--out", str(t / "filter.yaml")),
        ],
        ("filter.yaml", "--out", "--overwrite"),
    ),
    Case(
        "export --overwrite onto a link to a file",
        lambda t, g: [
            (t / "model.onnx").symlink_to(t / "flight.txt") or ((t / "flight.txt").write_text("mine") and "export"),
            *("--checkpoint", str(g["run"] / "best.pt"), "--format", "torchscript", "--out", str(t / "model.onnx")),
            "--overwrite",
        ],
        ("model.onnx", "--out", "symbolic link"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_outputs_leave_everything_as_it_was(case: Case, good, tmp_path, capsys) -> None:
    argv = case.build(tmp_path, good)
    before, before_good = files(tmp_path), files(good["flights"].parent)
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, f"{case.name}: exit {status}: {captured.err}"
    assert "Traceback" not in captured.err + captured.out
    lines = [ln for ln in captured.err.splitlines() if "error:" in ln]
    assert len(lines) == 1, captured.err
    for name in case.names:
        assert name in lines[0], f"{name!r} not in {lines[0]!r}"
    assert files(tmp_path) == before  # byte-identical, nothing new (staging, lock, folders) left
    assert files(good["flights"].parent) == before_good


def test_ctrl_c_in_the_first_epoch_of_train_overwrite_keeps_the_earlier_run(good, tmp_path, monkeypatch) -> None:
    import velobins_net.train as train_module

    out = earlier_run(tmp_path, good)
    before = files(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "train_epoch", interrupted)
    assert main(train_args(good["flights"], out, "--overwrite")) == 130
    assert files(tmp_path) == before


def test_train_overwrite_replaces_the_run_after_its_first_checkpoint(good, tmp_path, monkeypatch) -> None:
    import velobins_net.train as train_module

    out = earlier_run(tmp_path, good)
    before = files(out)
    evaluate, seen = train_module.evaluate, []

    def watching(*args, **kwargs):  # validation of epoch 0: nothing saved yet
        seen.append({k: v for k, v in files(out).items() if not k.startswith((".velobins-stage", LOCK_NAME))})
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate", watching)
    assert main(train_args(good["flights"], out, "--overwrite", "--epochs", "2", "--seed", "5")) == 0
    assert seen[0] == before  # the earlier run untouched until the first checkpoint
    assert seen[1]["last.pt"] != before["last.pt"]  # replaced by then
    assert read_checkpoint(out / "last.pt")["epoch"] == 1 and (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / MANIFEST_NAME).read_text())["files"] == [
        "best.pt",
        "history.json",
        "last.pt",
        "tensorboard",
    ]


def test_resume_repairs_a_best_pt_lost_between_two_saves(good, tmp_path, capsys) -> None:
    """Earlier versions saved last.pt before best.pt: Ctrl-C between them left a best epoch without best.pt."""
    out = earlier_run(tmp_path, good)
    last = read_checkpoint(out / "last.pt")
    assert last["best"]["epoch"] == last["epoch"] == 0
    (out / "best.pt").unlink()
    assert main(train_args(good["flights"], out, "--resume", "--epochs", "2")) == 0
    err = capsys.readouterr().err
    assert "resume: wrote" in err and "best.pt" in err
    best, last = read_checkpoint(out / "best.pt"), read_checkpoint(out / "last.pt")
    assert last["epoch"] == 1 and best["epoch"] == last["best"]["epoch"]


def test_check_json_into_a_pipe_and_to_stdout(good, tmp_path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["check", "--dataset", "csv", "--data", str(good["flights"]), "--json", str(fifo)]) == 0
    reader.join(timeout=60)
    assert json.loads(got[0])["summary"]["ok"] == 3 and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]
    for name in ("-", "/dev/stdout"):  # the JSON alone on stdout, the table on stderr
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "velobins_eval.cli",
                "check",
                "--dataset",
                "csv",
                "--data",
                str(good["flights"]),
                *("--json", name),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0 and json.loads(res.stdout)["summary"]["ok"] == 3 and "verdict" in res.stderr


def test_check_json_to_dev_null_and_dev_stdout_as_root_in_a_private_mount_namespace(good, tmp_path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    if subprocess.run([unshare, "--mount", "--propagation", "private", "true"], capture_output=True).returncode:
        pytest.skip("no private mount namespace on this machine")
    check = f"{sys.executable} -m velobins_eval.cli check --dataset csv --data {good['flights']}"
    script = (
        "set -e; mount -t tmpfs velobins-test /dev; mknod -m 666 /dev/null c 1 3; ln -s /proc/self/fd/1 /dev/stdout; "
        f"{check} --json /dev/null --overwrite > {tmp_path}/table.txt; "
        f"{check} --json /dev/stdout 2>/dev/null | cat > {tmp_path}/piped.json; "
        "test -c /dev/null && test -L /dev/stdout && test $(ls -A /dev | wc -l) = 2 && echo devices-intact"
    )
    res = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0 and res.stdout.strip() == "devices-intact", res.stderr
    assert json.loads((tmp_path / "piped.json").read_text())["summary"]["ok"] == 3
    assert "verdict" in (tmp_path / "table.txt").read_text()


def test_a_full_disk_names_the_file_not_a_temporary_one(tmp_path) -> None:
    """RLIMIT_FSIZE stands in for a full disk: the write fails with EFBIG ("File too large")."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    out = tmp_path / "sim"
    cmd = ["simulate", "--preset", "nano", "--flights", "1", "--seconds", "40", "--workers", "1", "--out", str(out)]
    res = subprocess.run(
        [sys.executable, "-m", "velobins_eval.cli", *cmd], capture_output=True, text=True, timeout=300, preexec_fn=limit
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip()
    assert f"{out / 'sim_circle_000.csv'}: cannot write it (File too large)" in line and ".tmp" not in line
    assert list(tmp_path.iterdir()) == []  # no partial flight, no staging, no folder left
