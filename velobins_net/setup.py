"""Build script of velobins_net (ament_python)."""

from setuptools import find_packages, setup

PACKAGE = "velobins_net"

NODES = {
    "velobins_net_node": "velobins_net.node:main",
}
"""Node executable → its ``main``. Each executable is installed as ``velobins_common.entry:main``, which
imports the node under the ``velobins.nodes`` group so that a stop during the import is quiet (its docstring)."""

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    package_data={
        PACKAGE + ".accel": ["*.cpp"],  # the native kernels, compiled on first use
        PACKAGE: ["models/*.pt", "models/*.yaml", "models/*.md", "models/LICENSE*"],  # the shipped models
    },
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="VeloBins maintainers",
    maintainer_email="maintainers@velobins.dev",
    description="VeloBins network: encoder, bin decoder, labels, losses, training, inference, export, node.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            *(f"{name} = velobins_common.entry:main" for name in NODES),
        ],
        "velobins.nodes": [f"{name} = {target}" for name, target in NODES.items()],
    },
)
