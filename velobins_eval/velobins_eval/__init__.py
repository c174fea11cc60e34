"""Dataset adapters, simulation, rosbag2 conversion, replay, metrics, reports and the velobins command line."""
