"""Build script of velobins_data (ament_python)."""

from setuptools import find_packages, setup

PACKAGE = "velobins_data"

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
    description="The Flight type, validation, storage, rosbag2 read/write, dataset adapters, simulator, doctor.",
    license="BSD-3-Clause",
)
