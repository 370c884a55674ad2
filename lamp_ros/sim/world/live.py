"""A world run in real time by `lamp sim --world`: its physics follows the robot's commands on
the wall clock, and with `expert` the world's scripted expert drives it through the command
topic a policy uses, so that its demonstrations can be recorded with `lamp record`.

An episode's clock starts at once, or, for a recording (`one_episode`), when every topic the
simulator publishes has a subscriber (the recorder: nothing of the episode is lost to
discovery); with `one_episode` it ends after the episode's length, saying how the task went.
"""

import numpy as np

from lamp_ros.sim.world.expert import PickPlaceExpert
from lamp_ros.sim.world.physics import MujocoWorld
from lamp_ros.sim.world.pick_place import PickPlaceEpisode
from lamp_ros.sim.world.world import World

EXPERT_RATE_HZ = 22.0


class LiveWorld:
    def __init__(self, node, world: World, seed: int, index: int, seconds: float,
                 expert: bool, one_episode: bool, command_topic: str):
        self.node = node
        self.world = world
        self.physics = MujocoWorld(world)
        self.index = index
        self.physics.reset(PickPlaceEpisode.draw(world.task, seed, index))
        self.seconds = seconds if seconds > 0 else world.task.seconds
        self.one_episode = one_episode
        self.started = None          # the wall-clock time (s) the episode's clock started
        self.outcome = None          # (success, error m) once the episode is over
        self.expert = None
        if expert:
            from trajectory_msgs.msg import JointTrajectory
            self.expert = PickPlaceExpert(self.physics,
                                          [j.max_step for j in world.robot.joints])
            self.expert_pub = node.create_publisher(JointTrajectory, command_topic, 10)
            node.create_timer(1.0 / EXPERT_RATE_HZ, self._command)

    def _listened(self) -> bool:
        """Every topic the simulator publishes has a subscriber (the expert's commands one
        besides the simulator's own)."""
        pubs = [pub for _, pub in self.node.camera_pubs.values()] + [self.node.joint_pub]
        heard = all(pub.get_subscription_count() > 0 for pub in pubs)
        return heard and (self.expert is None or self.expert_pub.get_subscription_count() > 1)

    def step(self, now: float, target) -> np.ndarray:
        """Physics up to `now` (wall clock, s) following `target`; the joints."""
        if self.started is None:
            if self.one_episode and not self._listened():
                return self.physics.joints()
            self.started = now
            self.node.get_logger().info(
                f'episode {self.index} of {self.world.name} starts'
                + (' (the expert drives it)' if self.expert else ''))
        self.physics.command(target)
        self.physics.advance(min(now - self.started, self.seconds))
        if self.outcome is None and self.physics.time >= self.seconds - 1e-9:
            self.outcome = (self.physics.success(), self.physics.error())
            self.node.get_logger().info(
                f'episode {self.index}: {"success" if self.outcome[0] else "failure"}, the cube '
                f'{self.outcome[1]:.3f} m from the bin centre after {self.seconds:g} s')
        return self.physics.joints()

    @property
    def over(self) -> bool:
        return self.one_episode and self.outcome is not None

    def _command(self) -> None:
        if self.started is None or self.outcome is not None:
            return
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
        msg = JointTrajectory()
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.joint_names = list(self.node.joints)
        point = JointTrajectoryPoint()
        point.positions = [float(v) for v in self.expert(self.physics.time)]
        msg.points = [point]
        self.expert_pub.publish(msg)

    def close(self) -> None:
        self.physics.close()
