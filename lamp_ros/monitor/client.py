"""A client of one running vla_node: its lifecycle, `~/hold` / `~/resume`, and what it reports.

A small node of our own, in its own context, spun by a background thread: it calls the node's
lifecycle services (`<node>/change_state`, `<node>/get_state`) and its std_srvs/Trigger services
(`<node>/hold`, `<node>/resume`), and keeps the latest `/diagnostics` status of the node, its
`<node>/profile` array and its recent log lines (from `/rosout`, so a refused configure can
say why here).

Service calls survive DDS's discovery race: `wait_for_service` can return before the server has
matched our request writer or our reply reader, and then a request or its reply is silently
dropped (ros2/rmw_fastrtps#390). GetState is idempotent and is asked again. A ChangeState whose
answer does not come is settled by asking for the state: changed to the transition's goal, it
ran; unchanged, it never arrived (or failed), and asking again tells which. `~/hold` is
idempotent; a `~/resume` asked again after a lost answer says "not held" when the first one
did resume, which is then what it reports.
"""

from collections import deque
import os
import threading
import time

TRANSITIONS = {'configure': 1, 'cleanup': 2, 'activate': 3, 'deactivate': 4}
GOAL = {'configure': 'inactive', 'cleanup': 'unconfigured', 'activate': 'active',
        'deactivate': 'inactive'}
# states from which a transition has nothing left to do (a script may ask twice)
DONE = {'configure': ('inactive', 'active'), 'cleanup': ('unconfigured',),
        'activate': ('active',), 'deactivate': ('inactive', 'unconfigured')}
TRANSITIONAL = ('configuring', 'cleaningup', 'shuttingdown', 'activating', 'deactivating',
                'errorprocessing')
LOG_LEVELS = {10: 'DEBUG', 20: 'INFO', 30: 'WARN', 40: 'ERROR', 50: 'FATAL'}


class NoAnswer(Exception):
    """The node did not answer in time (not running, another ROS domain, or busy)."""


def qualified(node: str) -> str:
    """'vla_policy' or '/ns/vla_policy' -> the fully qualified name, '/vla_policy'."""
    return '/' + node.strip('/')


class NodeClient:
    def __init__(self, node: str = '/vla_policy'):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from lifecycle_msgs.srv import ChangeState, GetState
        from rcl_interfaces.msg import Log
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions
        from std_msgs.msg import Float64MultiArray
        from std_srvs.srv import Trigger

        self.node_name = qualified(node)
        base = self.node_name.rsplit('/', 1)[-1]
        self.status_name = f'{base}: policy'           # node/diagnostics.py names it so
        self.logger_name = self.node_name.strip('/').replace('/', '.')
        self.status, self.status_at = None, None        # DiagnosticStatus, monotonic time
        self.profile, self.profile_at = None, None      # Float64MultiArray, monotonic time
        self.log = deque(maxlen=200)                    # (its stamp, s since 1970, level, text)
        self.lifecycle_state, self._state_future = None, None
        self.context = rclpy.Context()
        # Ctrl-C stays a KeyboardInterrupt here instead of shutting the context down under us
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(f'lamp_top_{os.getpid()}', context=self.context)
        n = self.node
        self._change = n.create_client(ChangeState, f'{self.node_name}/change_state')
        self._get = n.create_client(GetState, f'{self.node_name}/get_state')
        self._triggers = {name: n.create_client(Trigger, f'{self.node_name}/{name}')
                          for name in ('hold', 'resume')}
        n.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics, 10)
        n.create_subscription(Float64MultiArray, f'{self.node_name}/profile', self._on_profile,
                              10)
        # /rosout keeps its last messages for late joiners (transient local)
        n.create_subscription(Log, '/rosout', self._on_log, QoSProfile(
            depth=100, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(n)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    # ---- what the node reports ---------------------------------------------------------------

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            if status.name == self.status_name:
                self.status, self.status_at = status, time.monotonic()

    def _on_profile(self, msg) -> None:
        self.profile, self.profile_at = msg, time.monotonic()

    def _on_log(self, msg) -> None:
        if msg.name == self.logger_name:
            level = LOG_LEVELS.get(msg.level, str(msg.level))
            self.log.append((msg.stamp.sec + msg.stamp.nanosec * 1e-9, level, msg.msg))

    def log_since(self, since: float, levels=('WARN', 'ERROR', 'FATAL')) -> list:
        """The node's log lines of `levels` stamped after `since` (time.time(): the node runs
        on this machine's clock). /rosout also replays older lines to a new subscriber."""
        return [f'{level}: {text}' for t, level, text in list(self.log)
                if t >= since and level in levels]

    def wait_for_status(self, timeout: float, after: float = 0.0) -> bool:
        """True once a /diagnostics status of the node newer than `after` has come."""
        return wait_for(lambda: self.status_at is not None and self.status_at > after, timeout)

    # ---- services ----------------------------------------------------------------------------

    def wait_for_node(self, timeout: float) -> bool:
        """True once the node's lifecycle services are discovered."""
        return self._change.wait_for_service(timeout_sec=timeout) and \
            self._get.wait_for_service(timeout_sec=max(0.1, timeout))

    def _call(self, client, request, timeout: float):
        """The response, or None when none came within `timeout` (the request withdrawn)."""
        future = client.call_async(request)
        if wait_for(future.done, timeout):
            return future.result()
        client.remove_pending_request(future)
        return None

    def state(self, timeout: float = 10.0, attempt_s: float = 3.0) -> str:
        """The node's lifecycle state label (asked again when an answer is lost)."""
        from lifecycle_msgs.srv import GetState
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            response = self._call(self._get, GetState.Request(),
                                  min(attempt_s, end - time.monotonic()))
            if response is not None:
                self.lifecycle_state = response.current_state.label
                return self.lifecycle_state
        raise NoAnswer(f'{self.node_name}/get_state: no answer in {timeout:.0f} s')

    def poll_state(self) -> None:
        """Ask for the state without waiting (the live view): the answer lands in
        `lifecycle_state`; a request unanswered for 3 s is withdrawn and asked again."""
        from lifecycle_msgs.srv import GetState
        pending = self._state_future
        if pending is not None:
            future, sent = pending
            if future.done():
                self.lifecycle_state = future.result().current_state.label
            elif time.monotonic() - sent < 3.0:
                return
            else:
                self._get.remove_pending_request(future)
        self._state_future = (self._get.call_async(GetState.Request()), time.monotonic())

    def transition(self, name: str, timeout: float = 30.0, attempt_s: float = 8.0) -> tuple:
        """Run lifecycle transition `name` -> (succeeded, the state after it). A transition
        whose work is already done (configure on an active node) succeeds at once."""
        from lifecycle_msgs.srv import ChangeState
        end = time.monotonic() + timeout
        before = self.state(timeout)
        if before in DONE[name]:
            return True, before
        request = ChangeState.Request()
        request.transition.id = TRANSITIONS[name]
        future, now = self._change.call_async(request), before
        while True:
            if wait_for(future.done, max(0.0, min(attempt_s, end - time.monotonic()))):
                return future.result().success, self.state(max(1.0, end - time.monotonic()))
            if time.monotonic() >= end:
                self._change.remove_pending_request(future)
                raise NoAnswer(f'{self.node_name}/change_state ({name}): no answer in '
                               f'{timeout:.0f} s (last state {now!r})')
            now = self.state(max(1.0, end - time.monotonic()))
            if now in TRANSITIONAL:
                continue
            if now != before:  # it ran; its answer was lost
                return now == GOAL[name], now
            self._change.remove_pending_request(future)
            future = self._change.call_async(request)

    def trigger(self, name: str, timeout: float = 10.0, attempt_s: float = 3.0) -> tuple:
        """Call `<node>/<name>` (hold, resume) -> (success, the node's message)."""
        from std_srvs.srv import Trigger
        client = self._triggers[name]
        if not client.wait_for_service(timeout_sec=timeout):
            raise NoAnswer(f'{self.node_name}/{name}: no such service within {timeout:.0f} s')
        end, lost = time.monotonic() + timeout, False
        while time.monotonic() < end:
            response = self._call(client, Trigger.Request(),
                                  min(attempt_s, end - time.monotonic()))
            if response is None:
                lost = True
                continue
            if name == 'resume' and lost and not response.success and \
                    response.message == 'not held':
                return True, 'resumed (the first answer was lost; the node is no longer held)'
            return response.success, response.message
        raise NoAnswer(f'{self.node_name}/{name}: no answer in {timeout:.0f} s')

    def close(self) -> None:
        import rclpy
        self.executor.shutdown()
        self._thread.join(timeout=5)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def wait_for(predicate, timeout: float) -> bool:
    """True as soon as predicate() is (asked at least once), False after `timeout` s."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)
    return True
