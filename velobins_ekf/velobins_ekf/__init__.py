"""Error-state EKF fusing IMU propagation with the learned body-frame velocity, and its node."""
