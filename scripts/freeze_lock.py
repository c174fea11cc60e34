"""Regenerate requirements.lock from the current venv (run with the venv's python).

The ROS 2 wheels also install egg-info metadata under the plain ROS package name
(``rclpy==9.1.2`` beside ``ros-rclpy==9.1.2``); those names are not on any index, so they are
dropped. Local version labels (``+cpu``) are dropped so the pin matches the local torch build.
"""

import re
import subprocess
import sys
from pathlib import Path

HEADER = """# Pinned environment of the VeloBins workspace (installed by scripts/bootstrap.sh).
# Regenerate with: .venv/bin/python scripts/freeze_lock.py
"""


def main() -> None:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable", "--all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    pins = {}
    for line in frozen:
        name, _, version = line.partition("==")
        if not version:
            continue
        pins[name] = re.sub(r"\+.*$", "", version)
    ros = {n.lower()[4:].replace("-", "_") for n in pins if n.lower().startswith("ros-")}
    keep = [f"{n}=={v}" for n, v in pins.items() if n.lower().replace("-", "_") not in ros]
    out = Path(__file__).resolve().parents[1] / "requirements.lock"
    out.write_text(HEADER + "\n".join(sorted(keep, key=str.lower)) + "\n")
    print(f"wrote {out} ({len(keep)} pins)")


if __name__ == "__main__":
    main()
