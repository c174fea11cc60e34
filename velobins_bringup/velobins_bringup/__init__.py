"""Launch files, parameter files and the RViz configuration of the VeloBins suite."""
