"""A ROS graph for tests (used by test/conftest.py): vla_node in its own process (as users
run it), and in this process a simulated robot, a lifecycle driver and probes, spun by a
background executor."""

import os
import subprocess
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter


class RosHarness:
    def __init__(self, artifact: str, sim: bool = True, **node_params):
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState, GetState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory

        from lamp_ros.sim.robot import SimRobot
        params = {'artifact': artifact, **node_params}
        args = [sys.executable, '-m', 'lamp_ros.node.vla_node', '--ros-args']
        for key, value in params.items():
            args += ['-p', f'{key}:={_ros_value(value)}']
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=dict(os.environ, PYTHONUNBUFFERED='1'))
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.driver = Node('test_driver', context=self.context)
        self.sim = SimRobot(context=self.context) if sim else None
        self.commands, self.diagnostics, self.profiles, self.latency = [], [], [], []
        d = self.driver
        d.create_subscription(JointTrajectory, '/vla_policy/joint_trajectory',
                              lambda m: self.commands.append((time.monotonic(), m)), 50)
        d.create_subscription(DiagnosticArray, '/diagnostics',
                              lambda m: self.diagnostics.append((time.monotonic(), m)), 10)
        d.create_subscription(Float64MultiArray, '/vla_policy/profile',
                              lambda m: self.profiles.append(m), 10)
        d.create_subscription(Float64MultiArray, '/vla_policy/command_latency',
                              lambda m: self.latency.append(m), 50)
        self.change = d.create_client(ChangeState, '/vla_policy/change_state')
        self.get = d.create_client(GetState, '/vla_policy/get_state')
        # short callbacks: one thread (a MultiThreadedExecutor spins on the GIL, see
        # lamp_ros.node.vla_node.executor_for)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(d)
        if self.sim:
            self.executor.add_node(self.sim)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        if not self.change.wait_for_service(timeout_sec=30):
            raise RuntimeError('vla_policy lifecycle services never appeared:\n' + self.stop())

    def transition(self, transition_id: int, timeout: float = 30.0) -> bool:
        from lifecycle_msgs.srv import ChangeState
        request = ChangeState.Request()
        request.transition.id = transition_id
        future = self.change.call_async(request)
        return self._result(future, timeout).success

    def state(self) -> str:
        from lifecycle_msgs.srv import GetState
        return self._result(self.get.call_async(GetState.Request()), 10).current_state.label

    def _result(self, future, timeout):
        end = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > end:
                raise TimeoutError('service call timed out')
            time.sleep(0.01)
        return future.result()

    def set_sim(self, **params) -> None:
        self.sim.set_parameters([Parameter(k, value=v) for k, v in params.items()])

    def wait_for(self, predicate, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.05)
        return False

    def last_status(self):
        return self.diagnostics[-1][1].status[0] if self.diagnostics else None

    def stop(self) -> str:
        """Stop everything; return the node's log."""
        self.proc.terminate()
        try:
            out = self.proc.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out = self.proc.communicate()[0]
        self.executor.shutdown()
        self.thread.join(timeout=10)  # no timer callback may run on a node being destroyed
        for node in (self.driver, self.sim):
            if node is not None:
                node.destroy_node()
        rclpy.shutdown(context=self.context)
        return out


def _ros_value(value) -> str:
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (list, tuple)):
        return '[' + ','.join(_ros_value(v) for v in value) + ']'
    return str(value)
