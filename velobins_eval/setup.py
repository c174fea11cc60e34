"""Build script of velobins_eval (ament_python)."""

from setuptools import find_packages, setup

PACKAGE = "velobins_eval"

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
            "velobins_eval_node = velobins_eval.eval_node:main",
            "velobins_replay_node = velobins_eval.replay_node:main",
        ],
    },
)
