"""Build script of velobins_bridges (ament_python)."""

from setuptools import find_packages, setup

PACKAGE = "velobins_bridges"

NODES = {
    "velobins_rotor_bridge": "velobins_bridges.rotor_node:main",
    "velobins_imu_bridge": "velobins_bridges.imu_node:main",
    "velobins_odom_out": "velobins_bridges.odom_out_node:main",
}
"""Node executable → its ``main``. Each executable is installed as ``velobins_common.entry:main``, which
imports the node under the ``velobins.nodes`` group so that a stop during the import is quiet (its docstring)."""

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="VeloBins maintainers",
    maintainer_email="maintainers@velobins.dev",
    description="Bridges between autopilot topics and VeloBins: rotor speeds and IMU in, odometry out.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            *(f"{name} = velobins_common.entry:main" for name in NODES),
        ],
        "velobins.nodes": [f"{name} = {target}" for name, target in NODES.items()],
    },
)
