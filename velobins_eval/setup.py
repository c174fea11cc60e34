"""Build script of velobins_eval (ament_python)."""

from setuptools import find_packages, setup

PACKAGE = "velobins_eval"

NODES = {
    "velobins_eval_node": "velobins_eval.eval_node:main",
    "velobins_replay_node": "velobins_eval.replay_node:main",
}
"""Node executable → its ``main``. Each executable is installed as ``velobins_common.entry:main``, which
imports the node under the ``velobins.nodes`` group so that a stop during the import is quiet (its docstring)."""

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    package_data={PACKAGE: ["demo_data/nanobench/*"]},  # the held-out demo flights of `velobins demo`
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="VeloBins maintainers",
    maintainer_email="maintainers@velobins.dev",
    description="Metrics, scoring, calibration, reproduction, reports, replay and eval nodes, the velobins CLI.",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "velobins = velobins_eval.cli:main",
            *(f"{name} = velobins_common.entry:main" for name in NODES),
        ],
        "velobins.nodes": [f"{name} = {target}" for name, target in NODES.items()],
    },
)
