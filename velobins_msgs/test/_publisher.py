"""Child process of test_msgs_dds: publishes one RotorSpeeds and one VelocityEstimate stream."""

import sys

import rclpy
from rclpy.node import Node

from velobins_msgs.msg import RotorSpeeds, VelocityEstimate


def main() -> None:
    rclpy.init()
    node = Node("velobins_msgs_test_publisher")
    rotor_pub = node.create_publisher(RotorSpeeds, "/test/rotor_speeds", 10)
    vel_pub = node.create_publisher(VelocityEstimate, "/test/velocity", 10)

    def tick() -> None:
        now = node.get_clock().now().to_msg()
        rotor = RotorSpeeds()
        rotor.header.stamp = now
        rotor.header.frame_id = "base_link"
        rotor.kind = RotorSpeeds.KIND_NORMALIZED
        rotor.speeds = [0.1, 0.2, 0.3, 0.4]
        rotor_pub.publish(rotor)
        vel = VelocityEstimate()
        vel.header.stamp = now
        vel.header.frame_id = "base_link"
        vel.velocity.x, vel.velocity.y, vel.velocity.z = 1.5, -0.25, 0.125
        vel.covariance = [0.01, 0.0, 0.0, 0.0, 0.02, 0.0, 0.0, 0.0, 0.03]
        vel.bin_centers = [-1.0, 0.0, 1.0]
        vel.distribution = [0.25, 0.5, 0.25] * 3
        vel_pub.publish(vel)

    node.create_timer(0.05, tick)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
