"""Build script of velobins_bringup (ament_python)."""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "velobins_bringup"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        (os.path.join("share", PACKAGE, "launch"), glob("launch/*.py")),
        (os.path.join("share", PACKAGE, "config"), glob("config/*.yaml")),
        (os.path.join("share", PACKAGE, "config", "rotor_bridge"), glob("config/rotor_bridge/*.yaml")),
        (os.path.join("share", PACKAGE, "config", "imu_bridge"), glob("config/imu_bridge/*.yaml")),
        (os.path.join("share", PACKAGE, "config", "platforms"), glob("config/platforms/*.yaml")),
        (os.path.join("share", PACKAGE, "config", "recipes"), glob("config/recipes/*")),
        (os.path.join("share", PACKAGE, "foxglove"), glob("foxglove/*.json")),
        (os.path.join("share", PACKAGE, "rviz"), glob("rviz/*.rviz")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="VeloBins maintainers",
    maintainer_email="maintainers@velobins.dev",
    description="Launch files, parameter files and the RViz configuration of the VeloBins suite.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [],
    },
)
