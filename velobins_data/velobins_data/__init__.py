"""VeloBins data: the ``Flight`` type, validation, storage, rosbag2 files, dataset adapters, the simulator."""
