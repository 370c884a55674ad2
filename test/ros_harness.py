"""A ROS graph for tests (used by test/conftest.py): vla_node in its own process (as users
run it), and in this process a simulated robot, a lifecycle driver and probes, spun by a
background executor.

Service calls here survive DDS's discovery race: `wait_for_service` can return before the
server has matched our request writer or our reply reader, and then the request or its reply
is silently dropped (ros2/rmw_fastrtps#390, ros2/rmw_cyclonedds#187). GetState is idempotent and
simply asked again; a ChangeState whose answer does not come is settled by asking for the state
(see `transition`)."""

import os
import subprocess
import sys
import tempfile
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter


class RosHarness:
    def __init__(self, artifact: str, sim: bool = True, node_env: dict | None = None,
                 sim_params: dict | None = None, **node_params):
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState, GetState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory

        from lamp_ros.sim.robot import SimRobot
        params = {'artifact': artifact, **node_params}
        args = [sys.executable, '-m', 'lamp_ros.node.vla_node', '--ros-args']
        for key, value in params.items():
            args += ['-p', f'{key}:={_ros_value(value)}']
        # The node logs to a file, not a pipe: a pipe nobody reads blocks a chatty node once it
        # holds 64 KB, and a file can be read while the node still runs (`log`).
        self._log = tempfile.NamedTemporaryFile('w+', prefix='vla_node_', suffix='.log')
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     text=True, env=dict(os.environ, PYTHONUNBUFFERED='1',
                                                         **(node_env or {})))
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.driver = Node('test_driver', context=self.context)
        self.sim = SimRobot(context=self.context, parameter_overrides=[
            Parameter(k, value=v) for k, v in (sim_params or {}).items()]) if sim else None
        self.commands, self.diagnostics, self.profiles, self.latency = [], [], [], []
        d = self.driver
        self.command_sub = d.create_subscription(
            JointTrajectory, '/vla_policy/joint_trajectory',
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

    TRANSITIONAL = {'configuring', 'cleaningup', 'shuttingdown', 'activating', 'deactivating',
                    'errorprocessing'}
    # lifecycle_msgs/Transition ids -> the state a successful transition ends in
    GOAL = {1: 'inactive', 2: 'unconfigured', 3: 'active', 4: 'inactive', 5: 'finalized',
            6: 'finalized', 7: 'finalized'}

    def transition(self, transition_id: int, timeout: float = 30.0,
                   attempt_s: float = 8.0) -> bool:
        """Ask for a lifecycle transition; True when it succeeded.

        A request that got no answer within `attempt_s` was lost, or its reply was: the
        state tells which. Mid-transition: wait on. Changed: the transition ran, and it
        succeeded if the node is in the transition's goal state. Unchanged: it never arrived,
        or it failed (a failed transition returns to where it started); sending it again gives
        the answer either way."""
        from lifecycle_msgs.srv import ChangeState
        request = ChangeState.Request()
        request.transition.id = transition_id
        before = self.state()
        end = time.monotonic() + timeout
        future, now = self.change.call_async(request), before
        while True:
            if self.wait_for(future.done, min(attempt_s, end - time.monotonic())):
                return future.result().success
            if time.monotonic() >= end:
                raise TimeoutError(f'transition {transition_id}: no answer in {timeout:.0f} s '
                                   f'(last state {now!r})\n--- node log ---\n{self.log()}')
            now = self.state()
            if now in self.TRANSITIONAL:
                continue
            if now != before:
                return now == self.GOAL.get(transition_id, now)
            self.change.remove_pending_request(future)
            future = self.change.call_async(request)

    def state(self, timeout: float = 20.0, attempt_s: float = 4.0) -> str:
        """The node's lifecycle state label (asked again when an answer is lost)."""
        from lifecycle_msgs.srv import GetState
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            future = self.get.call_async(GetState.Request())
            if self.wait_for(future.done, min(attempt_s, end - time.monotonic())):
                return future.result().current_state.label
            self.get.remove_pending_request(future)
        raise TimeoutError(f'get_state: no answer in {timeout:.0f} s\n--- node log ---\n'
                           f'{self.log()}')

    def log(self) -> str:
        """What the node has printed so far."""
        with open(self._log.name, encoding='utf-8', errors='replace') as f:
            return f.read()

    def set_sim(self, **params) -> None:
        self.sim.set_parameters([Parameter(k, value=v) for k, v in params.items()])

    @staticmethod
    def wait_for(predicate, timeout: float) -> bool:
        """True as soon as predicate() is (it is asked at least once), False after timeout."""
        end = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True

    def assert_rate(self, rate_hz: float = 22.0, seconds: float = 4.0) -> str:
        """The node publishes at `rate_hz` on its own clock (node_rate): cadence within 5%,
        published at most 10% short (a starved process's timer drops ticks on a loaded
        two-core machine). Returns the figures as text."""
        cadence, published = self.node_rate(seconds)
        report = f'cadence {cadence:.2f} Hz, published {published:.2f} Hz'
        assert abs(cadence - rate_hz) <= 0.05 * rate_hz, report
        assert 0.90 * rate_hz <= published <= 1.05 * rate_hz, report
        return report

    def node_rate(self, seconds: float = 6.0, timeout: float = 60.0) -> tuple:
        """(cadence Hz, published Hz) over `seconds` of the node's own clock, from the 10th
        latency message on (past the episode's first ticks).

        Each command's latency message carries the node's tick time and the index of that
        command among those the node published, so the rate is measured on the node's clock
        (not from this busy test process's receive times) and a message lost on the way is a
        gap in the indices, not a slow loop. Cadence: the median interval between consecutive
        commands (robust to a late tick and its catch-up). Published: commands per second of
        node time (the timer drops the ticks of a process kept off the CPU for longer than a
        period, which happens on a loaded two-core machine)."""
        import numpy as np

        from lamp_ros.node.vla_node import LATENCY_LAYOUT
        tick, index = LATENCY_LAYOUT.index('tick_s'), LATENCY_LAYOUT.index('command_index')
        first = len(self.latency) + 10
        if not self.wait_for(lambda: len(self.latency) > first + 1 and self.latency[-1].data[
                tick] - self.latency[first].data[tick] >= seconds, timeout):
            raise TimeoutError(f'{seconds} s of commands did not come in {timeout} s\n'
                               f'--- node log ---\n{self.log()}')
        t, i = np.array([(m.data[tick], m.data[index]) for m in self.latency[first:]]).T
        cadence = 1.0 / np.median(np.diff(t)[np.diff(i) == 1])
        return cadence, (i[-1] - i[0]) / (t[-1] - t[0])

    @classmethod
    def wait_quiet(cls, count, quiet: float, timeout: float) -> bool:
        """True once count() has not changed for `quiet` seconds (what was in flight has
        arrived), False if it keeps changing for `timeout` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            before = count()
            if not cls.wait_for(lambda: count() != before, min(quiet, end - time.monotonic())):
                return True
        return False

    def last_status(self):
        return self.diagnostics[-1][1].status[0] if self.diagnostics else None

    def stop(self) -> str:
        """Stop everything; return the node's log."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        out = self.log()
        self._log.close()
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
