"""The lowest layer of VeloBins: constants and ROS-free helpers shared by every package.

It imports neither ROS, torch nor any other VeloBins package, so anything may depend on it and
it never closes an import cycle (``velobins_bringup/test/test_architecture.py`` checks).
"""
