"""`lamp sim`: a simulated arm on ROS 2, built from a robot description or a physics world.

With `world` (a name under config/worlds/, or a world file; `lamp sim --world NAME`) the robot
is that world's MuJoCo arm (sim/world/): physics steps in real time at the joint rate following
the last command through the model's position actuators, the cameras are rendered by MuJoCo at
`camera_rate_hz`, and the task is the world's (episode `task_episode` of seed `task_seed`, 0 if
negative; `moving_speed` >= 0 moves the bin); `errors` keeps the task's error in metres.
`expert` makes the world's scripted expert drive it through the command topic, and
`one_episode` waits for a recorder, runs one episode (`episode_seconds`, or the world's) and
exits (world/live.py). Else the robot comes from an artifact (`artifact`: the robot its spec
named, in its ABI, or else the robot its interface describes, artifact_robot.py), from a robot
file (`robot_file`, spec/robot.py), or is the bundled 7-joint arm (config/robots/sim7.yaml,
whose cameras the `cameras`, `camera_width`, `camera_height`, `encoding` and `image_transport`
parameters then shape). It publishes each camera as the robot
says (a moving synthetic scene; jpeg/png as CompressedImage on exactly the given topic, raw
encodings as Image) and /joint_states under the robot's joint names (`joint_names` renames
them: a driver that names the same joints otherwise); the joints follow the commands on the
policy's output topic with a first-order lag (time constant `tau_s`), within the robot's
limits, so demo and tests close the loop. Cameras can be paused with the `cameras_enabled`
parameter (tests use it to starve the policy). With `task_seed` >= 0 the scene is an episode of
the evaluation task (task.py, episode `task_episode`), and `errors` keeps the task's error at
every joint step (what `lamp eval` measures, here over ROS). It says what it simulates when it
starts, and every STATUS_PERIOD_S seconds how many frames, joint states and commands went by,
so a terminal shows whether the loop is closed.
"""

import os

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data

from lamp_ros.node import convert
from lamp_ros.sim.artifact_robot import robot_of_artifact
from lamp_ros.sim.dynamics import follow
from lamp_ros.sim.scene import render
from lamp_ros.sim.task import ReachTask
from lamp_ros.spec.robot import parse_robot, Robot, RobotCamera

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM7 = os.path.join(ROOT, 'config', 'robots', 'sim7.yaml')
STATUS_PERIOD_S = 5.0   # one status line this often


def describe(robot: Robot) -> str:
    """The robot in one line: its cameras (size, encoding, topic) and joints."""
    cameras = ', '.join(f'{slot} {c.width}x{c.height} {c.encoding} on {c.topic}'
                        for slot, c in robot.cameras.items()) or 'none'
    return f'cameras: {cameras}; {len(robot.joints)} joints {list(robot.joint_names)}'


class SimRobot(Node):
    def __init__(self, name: str = 'sim_robot', **kwargs):
        super().__init__(name, **kwargs)
        p = {'artifact': '', 'robot_file': '', 'joint_names': [''],
             'camera_width': 320, 'camera_height': 240, 'encoding': 'rgb8',
             'image_transport': 'raw', 'camera_rate_hz': 10.0, 'joint_rate_hz': 50.0,
             'tau_s': 0.15, 'cameras': ['base', 'left_wrist', 'right_wrist'],
             'command_topic': '/vla_policy/joint_trajectory', 'cameras_enabled': True,
             'task_seed': -1, 'task_episode': 0, 'world': '', 'moving_speed': -1.0,
             'expert': False, 'one_episode': False, 'episode_seconds': 0.0}
        for key, value in p.items():
            self.declare_parameter(key, value)
        self.live = None   # a MuJoCo world in real time (sim/world/live.py), with `world`
        self.robot, source = self._robot()
        names = [n for n in self._p('joint_names') if n] or list(self.robot.joint_names)
        if len(names) != len(self.robot.joints):
            raise ValueError(f'joint_names: {len(names)} names for the robot\'s '
                             f'{len(self.robot.joints)} joints')
        self.joints = tuple(names)
        self.lower = np.array([j.lower for j in self.robot.joints])
        self.upper = np.array([j.upper for j in self.robot.joints])
        self.q = np.clip(np.zeros(len(self.joints)), self.lower, self.upper)
        self.target = self.q.copy()
        self.commands = 0
        seed = self._p('task_seed')
        self.task = ReachTask.episode(seed, self._p('task_episode')) if seed >= 0 and \
            self.live is None else None
        self.errors = []   # (t, task error: px in the 2D scene, m in a world) per joint step
        from rclpy.task import Future
        self.finished = Future()   # done when a one-episode world is over: (success, error)
        if self.live is not None:
            self.q = self.live.physics.joints()
            self.target = self.q.copy()
        self._t0 = self._now()
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory
        self.camera_pubs = {
            slot: (camera, self.create_publisher(CompressedImage if camera.compressed else Image,
                                                 camera.topic, qos_profile_sensor_data))
            for slot, camera in self.robot.cameras.items()}
        self.joint_pub = self.create_publisher(JointState, '/joint_states', 10)
        self.frames = {}   # the last frame rendered per camera slot
        topic = self._p('command_topic')
        if topic.endswith('commands'):
            self.create_subscription(Float64MultiArray, topic, self._on_array, 10)
        else:
            self.create_subscription(JointTrajectory, topic, self._on_trajectory, 10)
        self.frames_sent = dict.fromkeys(self.camera_pubs, 0)
        self.joint_states_sent = 0
        self._last_status = (self._now(), dict(self.frames_sent), 0, 0)
        self.create_timer(1.0 / self._p('camera_rate_hz'), self._publish_cameras)
        self.create_timer(1.0 / self._p('joint_rate_hz'), self._step_joints)
        self.create_timer(STATUS_PERIOD_S, self._log_status)
        self.get_logger().info(f'simulating {self.robot.name}, {source}: '
                               f'{describe(self.robot)}; following commands on {topic}')

    def _p(self, name):
        return self.get_parameter(name).value

    def _robot(self) -> tuple:
        """(robot, where it came from): a world's, the artifact's, a robot file's, or the
        bundled arm shaped by the camera parameters."""
        if self._p('world'):
            from lamp_ros.sim.world.live import LiveWorld
            from lamp_ros.sim.world.world import load_world
            world = load_world(self._p('world'))
            if self._p('moving_speed') >= 0:
                world = world.moving(self._p('moving_speed'))
            self.live = LiveWorld(self, world, max(self._p('task_seed'), 0),
                                  self._p('task_episode'), self._p('episode_seconds'),
                                  self._p('expert'), self._p('one_episode'),
                                  self._p('command_topic'))
            moving = f', bin moving at {world.task.speed:g} m/s' if world.task.speed else ''
            return world.robot, f'world {world.name} (MuJoCo, {world.model.package}\'s model' \
                f'{moving})'
        if self._p('artifact'):
            return robot_of_artifact(self._p('artifact'))
        if self._p('robot_file'):
            path = os.path.abspath(self._p('robot_file'))
            return parse_robot({'file': path}, ROOT, 22.0), f'robot file {path}'
        arm = parse_robot({'file': SIM7}, ROOT, 22.0)
        compressed = self._p('image_transport') == 'compressed'
        encoding = 'jpeg' if compressed else self._p('encoding')
        cameras = {slot: RobotCamera(f'/camera/{slot}/image_raw' +
                                     ('/compressed' if compressed else ''), encoding,
                                     self._p('camera_width'), self._p('camera_height'))
                   for slot in self._p('cameras')}
        return Robot(arm.name, arm.joints, cameras, arm.action), 'the bundled arm'

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_trajectory(self, msg) -> None:
        if msg.points:
            index = {n: i for i, n in enumerate(msg.joint_names)}
            target = [msg.points[0].positions[index[j]] for j in self.joints if j in index]
            if len(target) == len(self.joints):
                self.target = np.clip(np.array(target), self.lower, self.upper)
                self.commands += 1

    def _on_array(self, msg) -> None:
        if len(msg.data) == len(self.joints):
            self.target = np.clip(np.array(msg.data), self.lower, self.upper)
            self.commands += 1

    def _step_joints(self) -> None:
        from sensor_msgs.msg import JointState
        dt = 1.0 / self._p('joint_rate_hz')
        if self.live is not None:   # real time: physics catches up with the clock
            self.q = self.live.step(self._now() - self._t0, self.target)
            self.errors.append((self.live.physics.time, self.live.physics.error()))
            if self.live.over and not self.finished.done():
                self.finished.set_result(self.live.outcome)
        else:
            self.q = follow(self.q, self.target, dt, self._p('tau_s'))
        if self.task is not None:
            t = self._now() - self._t0
            self.errors.append((t, self.task.error_px(t, self.q)))
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = list(self.joints)
        msg.position = [float(v) for v in self.q]
        self.joint_pub.publish(msg)
        self.joint_states_sent += 1

    def _publish_cameras(self) -> None:
        if not self._p('cameras_enabled'):
            return
        stamp = self.get_clock().now().to_msg()
        t = self._now() - self._t0
        for slot, (camera, pub) in self.camera_pubs.items():
            rgb = self.live.physics.frame(slot, camera.width, camera.height) if self.live else \
                render(slot, camera.width, camera.height, t, self.q,
                       None if self.task is None else self.task.cube_x(t))
            self.frames[slot] = rgb
            msg = convert.rgb_to_compressed(rgb, camera.encoding) if camera.compressed else \
                convert.rgb_to_image(rgb, camera.encoding)
            msg.header.stamp = stamp
            msg.header.frame_id = f'{slot}_camera'
            pub.publish(msg)
            self.frames_sent[slot] += 1

    def destroy_node(self) -> None:
        if self.live is not None:
            self.live.close()
        super().destroy_node()

    def _log_status(self) -> None:
        """What went by since the last status line: frames per camera, joint states, commands
        received (none: nothing drives the robot yet)."""
        now = self._now()
        since, frames, joint_states, commands = self._last_status
        seconds = max(now - since, 1e-9)
        self._last_status = (now, dict(self.frames_sent), self.joint_states_sent, self.commands)
        sent = ', '.join(f'{slot} {n - frames.get(slot, 0)}' for slot, n in
                         self.frames_sent.items()) or 'no cameras'
        if not self._p('cameras_enabled'):
            sent += ' (cameras paused)'
        received = self.commands - commands
        waiting = '' if received else (f' (nothing drives it: is a vla_node active and '
                                       f'publishing on {self._p("command_topic")}?)')
        states = self.joint_states_sent - joint_states
        task = ''
        if self.live is not None:
            physics = self.live.physics
            task = (f'; task: cube {physics.error():.3f} m from the bin centre, '
                    f'{"in the bin" if physics.success() else "not in the bin"}')
        self.get_logger().info(
            f'last {seconds:.1f} s: frames {sent}; joint states {states} '
            f'({states / seconds:.0f}/s); commands received {received} '
            f'({received / seconds:.1f}/s){waiting}{task}')


def main(args=None):
    """Run the simulator until stopped; a one-episode world returns its (success, error)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from lamp_ros.node.dds_profile import use_lamp_profile
    use_lamp_profile()  # before rclpy.init (Fast DDS reads it then): raw frames arrive whole
    try:
        with rclpy.init(args=args):
            robot = SimRobot()
            try:
                rclpy.spin_until_future_complete(robot, robot.finished)
                return robot.finished.result() if robot.finished.done() else None
            except Exception:
                if robot.context.ok():
                    raise
                # a signal shut the context down under a frame being published: a normal stop
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
