"""Build script of velobins_ekf (ament_python)."""

from setuptools import find_packages, setup

PACKAGE = "velobins_ekf"

NODES = {
    "velobins_ekf_node": "velobins_ekf.node:main",
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
    description="Error-state EKF fusing IMU propagation with the learned body-frame velocity, and its node.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            *(f"{name} = velobins_common.entry:main" for name in NODES),
        ],
        "velobins.nodes": [f"{name} = {target}" for name, target in NODES.items()],
    },
)
