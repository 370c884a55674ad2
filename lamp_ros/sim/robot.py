"""`lamp sim`: a simulated 7-joint arm on ROS 2.

Publishes three cameras (a moving synthetic scene, configurable size, encoding and transport)
and /joint_states; the joints follow the commands on the policy's output topic with a
first-order lag (time constant `tau_s`), so demo and tests close the loop. Cameras can be paused
with the `cameras_enabled` parameter (tests use it to starve the policy).
"""

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data

from lamp_ros.node import convert
from lamp_ros.sim.dynamics import follow
from lamp_ros.sim.scene import render

JOINTS = ('joint1', 'joint2', 'joint3', 'joint4', 'joint5', 'joint6', 'gripper')


class SimRobot(Node):
    def __init__(self, name: str = 'sim_robot', **kwargs):
        super().__init__(name, **kwargs)
        p = {'camera_width': 320, 'camera_height': 240, 'encoding': 'rgb8',
             'image_transport': 'raw', 'camera_rate_hz': 10.0, 'joint_rate_hz': 50.0,
             'tau_s': 0.15, 'cameras': ['base', 'left_wrist', 'right_wrist'],
             'command_topic': '/vla_policy/joint_trajectory', 'cameras_enabled': True}
        for key, value in p.items():
            self.declare_parameter(key, value)
        self.q = np.zeros(len(JOINTS))
        self.target = self.q.copy()
        self.commands = 0
        self._t0 = self._now()
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory
        self.compressed = self._p('image_transport') == 'compressed'
        msg_type = CompressedImage if self.compressed else Image
        suffix = '/compressed' if self.compressed else ''
        self.camera_pubs = {
            slot: self.create_publisher(msg_type, f'/camera/{slot}/image_raw{suffix}',
                                        qos_profile_sensor_data)
            for slot in self._p('cameras')}
        self.joint_pub = self.create_publisher(JointState, '/joint_states', 10)
        topic = self._p('command_topic')
        if topic.endswith('commands'):
            self.create_subscription(Float64MultiArray, topic, self._on_array, 10)
        else:
            self.create_subscription(JointTrajectory, topic, self._on_trajectory, 10)
        self.create_timer(1.0 / self._p('camera_rate_hz'), self._publish_cameras)
        self.create_timer(1.0 / self._p('joint_rate_hz'), self._step_joints)

    def _p(self, name):
        return self.get_parameter(name).value

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_trajectory(self, msg) -> None:
        if msg.points:
            index = {n: i for i, n in enumerate(msg.joint_names)}
            target = [msg.points[0].positions[index[j]] for j in JOINTS if j in index]
            if len(target) == len(JOINTS):
                self.target = np.array(target)
                self.commands += 1

    def _on_array(self, msg) -> None:
        if len(msg.data) == len(JOINTS):
            self.target = np.array(msg.data)
            self.commands += 1

    def _step_joints(self) -> None:
        from sensor_msgs.msg import JointState
        dt = 1.0 / self._p('joint_rate_hz')
        self.q = follow(self.q, self.target, dt, self._p('tau_s'))
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = list(JOINTS)
        msg.position = [float(v) for v in self.q]
        self.joint_pub.publish(msg)

    def _publish_cameras(self) -> None:
        if not self._p('cameras_enabled'):
            return
        stamp = self.get_clock().now().to_msg()
        t = self._now() - self._t0
        w, h = self._p('camera_width'), self._p('camera_height')
        for slot, pub in self.camera_pubs.items():
            rgb = render(slot, w, h, t, self.q)
            msg = convert.rgb_to_compressed(rgb) if self.compressed else \
                convert.rgb_to_image(rgb, self._p('encoding'))
            msg.header.stamp = stamp
            msg.header.frame_id = f'{slot}_camera'
            pub.publish(msg)


def main(args=None) -> None:
    import rclpy
    from rclpy.executors import ExternalShutdownException
    try:
        with rclpy.init(args=args):
            rclpy.spin(SimRobot())
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
