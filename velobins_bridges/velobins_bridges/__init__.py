"""VeloBins bridges: autopilot topics in (rotor speeds, IMU) and odometry out, as pure cores and thin nodes."""
