"""`vla_node`: the lifecycle node that drives a robot with a compiled artifact.

configure loads the artifact through the Runtime (a refusal is logged with its reason and the
node stays unconfigured), checks it against the parameters, and creates publishers,
subscriptions and timers (timers cancelled); activate starts an episode and the control timer;
deactivate stops it; cleanup releases everything. The control tick takes the freshest
consistent observation, steps the runtime and publishes one command; on stale or rejected input,
an inference error or a non-finite result it holds the last safe command (or publishes nothing
with on_fault=silent) and says why on /diagnostics. It never publishes NaN.

Before a policy drives hardware: `~/hold` (std_srvs/Trigger) stops the policy from moving the
robot and publishes where the joints are (or one empty trajectory, `hold_mode`) until
`~/resume`, which starts a new episode; `dry_run` runs everything but publishes the commands on
~/dry_run/<topic> only. Both are logged and shown on /diagnostics. With `trajectory_points` N >
1 each JointTrajectory carries the command and the next N - 1 planned actions, timed at the
control period, with velocities and the tick time as stamp, so a JointTrajectoryController
runs through a chunk instead of stopping at every message.
"""

from collections import deque
import gc
import time
import traceback

import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import (ExternalShutdownException, MultiThreadedExecutor,
                             SingleThreadedExecutor)
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.qos import qos_profile_sensor_data
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from lamp_ros.node import convert, records
from lamp_ros.node.dds_profile import receive_buffer_warning, use_lamp_profile
from lamp_ros.node.diagnostics import (diagnostic_status, PROFILE_LAYOUT, profile_values,
                                       ReceiveRates)
from lamp_ros.node.engine import ControlEngine, skipped_periods
from lamp_ros.node.hold import Hold
from lamp_ros.node.params import check, NodeConfig, PARAMETERS
from lamp_ros.node.record_publisher import RecordPublisher
from lamp_ros.node.records import LATENCY_LAYOUT  # noqa: F401 (the layout's old home)
from lamp_ros.node.status_line import StatusLine

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class VlaNode(LifecycleNode):
    def __init__(self, name: str = 'vla_policy', **kwargs):
        super().__init__(name, **kwargs)
        for key, (default, doc) in PARAMETERS.items():
            self.declare_parameter(key, default, ParameterDescriptor(description=doc))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.runtime = None
        self.config = None
        self.engine = None
        self._lamp_pubs, self._lamp_subs, self._lamp_timers = {}, [], {}
        self._records = None
        from std_srvs.srv import Trigger
        # there in every state, so an operator's call is answered (refused while not active)
        self.create_service(Trigger, '~/hold', self._on_hold)
        self.create_service(Trigger, '~/resume', self._on_resume)
        self._active = False
        self._hold = Hold()
        self._status_line = StatusLine()   # a log line every few seconds while active
        self._reset_counters()

    # ---- parameters --------------------------------------------------------------------------

    def _on_set_parameters(self, params):
        for p in params:
            reason = check(p.name, p.value)
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    def _read_config(self) -> NodeConfig:
        return NodeConfig({k: self.get_parameter(k).value for k in PARAMETERS})

    # ---- lifecycle ---------------------------------------------------------------------------

    def on_configure(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('configuring')
        try:
            self._configure()
        except Exception as exc:  # rclpy swallows exceptions here: log them ourselves
            self.get_logger().error(f'configure failed: {exc}\n{traceback.format_exc()}')
            self._release()
            return FAILURE
        # The loaded artifact and rclpy are tens of thousands of long-lived Python objects:
        # every full collection walked them, on a busy machine a pause of the order of the
        # 45 ms control period. Frozen, the collector only looks at what ticks allocate.
        gc.collect()
        gc.freeze()
        self.get_logger().info(f'artifact {self.runtime.id[:16]} loaded ({self.runtime.device}, '
                               f'{self.config.execution}); {len(self._lamp_subs)} subscriptions; '
                               f'joints {self.joint_names}')
        return SUCCESS

    def _configure(self) -> None:
        from lamp_ros.runtime import Runtime
        cfg = self.config = self._read_config()
        for name, value in cfg.values.items():
            reason = check(name, value)
            if reason:
                raise ValueError(reason)
        self.runtime = Runtime.load(cfg.artifact, device=cfg.device or None,
                                    execution=cfg.execution, overrides=cfg.overrides(),
                                    threads=cfg.inference_threads,
                                    rate_hz=cfg.rate_hz or None)
        artifact_joints = list(self.runtime.joint_names)
        # joint_names remaps: action dimension i is read from and written to the robot joint
        # joint_names[i] (one artifact, robots whose drivers name the joints differently)
        joints = [j for j in cfg.joint_names if j] or artifact_joints
        if len(joints) != len(artifact_joints) or len(set(joints)) != len(joints):
            raise ValueError(f'joint_names {joints}: one distinct robot joint per joint of the '
                             f'artifact {artifact_joints}')
        self.joint_names = joints
        robot = self.runtime.artifact.manifest['abi'].get('robot') or {}
        slots = cfg.camera_topics(self.runtime.camera_slots, robot.get('cameras'))
        unknown = sorted(set(slots) - set(self.runtime.camera_slots))
        if unknown:
            raise ValueError(f'cameras: slots {unknown} are not in the artifact ABI '
                             f'{list(self.runtime.camera_slots)}')
        self.engine = ControlEngine(self.runtime, list(slots), joints, cfg.prompt,
                                    cfg.max_obs_age_s, cfg.max_skew_s, cfg.on_fault)
        self._create_io(cfg, slots)
        published = {name: pub.topic_name for name, pub in self._lamp_pubs.items()}
        self._records.session(records.session(self.get_fully_qualified_name(), self.runtime,
                                              cfg, slots, self.joint_names,
                                              {**published, **self._records.topics()}))

    def _create_io(self, cfg, slots) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory
        if cfg.output == 'joint_trajectory':
            out_type, default_topic = JointTrajectory, '~/joint_trajectory'
        else:
            out_type, default_topic = Float64MultiArray, '~/commands'
        topic = cfg.output_topic or default_topic
        if cfg.dry_run:  # never a publisher on the real command topic
            topic = '~/dry_run/' + topic.rstrip('/').rsplit('/', 1)[-1]
            self.get_logger().warning(f'DRY RUN: commands go to {topic} only')
        self.command_topic = topic
        self._records = RecordPublisher(self)
        self._lamp_pubs = {
            'command': self.create_lifecycle_publisher(out_type, topic, 10),
            'profile': self.create_lifecycle_publisher(Float64MultiArray, '~/profile', 10),
            'diagnostics': self.create_lifecycle_publisher(DiagnosticArray, '/diagnostics', 10),
        }
        inputs = ReentrantCallbackGroup()
        # Best effort, which every publisher matches, reliable or not. BEST_AVAILABLE would
        # repair a reliable camera's lost fragments, but it resolves against the publishers
        # known when the subscription is made: with none yet (a driver started after the
        # node) it becomes reliable and never matches a best-effort camera. Raw frames arrive
        # whole through the Fast DDS profile instead (dds_profile.py; docs/node.md).
        self._received = received = ReceiveRates()
        warning = receive_buffer_warning()
        if warning and not all(compressed for _, compressed in slots.values()):
            self.get_logger().warning(warning)
        for slot, (topic, compressed) in slots.items():
            name = self.resolve_topic_name(topic)
            self._lamp_subs.append(self.create_subscription(
                CompressedImage if compressed else Image, topic,
                lambda msg, slot=slot, compressed=compressed, name=name: (
                    received.note(name), self._on_image(slot, msg, compressed)),
                qos_profile_sensor_data, callback_group=inputs))
        joints = self.resolve_topic_name(cfg.joint_states_topic)
        self._lamp_subs.append(self.create_subscription(
            JointState, cfg.joint_states_topic,
            lambda msg: (received.note(joints), self._on_joints(msg)), qos_profile_sensor_data,
            callback_group=inputs))
        self._lamp_timers = {
            'control': self.create_timer(self.runtime.period, self._on_tick,
                                         callback_group=MutuallyExclusiveCallbackGroup()),
            'diagnostics': self.create_timer(1.0, self._on_diagnostics,
                                             callback_group=MutuallyExclusiveCallbackGroup()),
        }
        for timer in self._lamp_timers.values():
            timer.cancel()

    def on_activate(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('activating: new episode')
        self.engine.start(self._now())
        self._reset_counters()
        self._hold = Hold()
        for timer in self._lamp_timers.values():
            timer.reset()
        self._active = True
        return super().on_activate(state)

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('deactivating')
        self._active = False
        for timer in self._lamp_timers.values():
            timer.cancel()
        return super().on_deactivate(state)

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('cleaning up')
        self._release()
        return SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('shutting down')
        self._release()
        return SUCCESS

    def on_error(self, state) -> TransitionCallbackReturn:
        self.get_logger().error('error transition: releasing resources')
        self._release()
        return SUCCESS

    def _release(self) -> None:
        for timer in self._lamp_timers.values():
            timer.cancel()
            self.destroy_timer(timer)
        for sub in self._lamp_subs:
            self.destroy_subscription(sub)
        for pub in self._lamp_pubs.values():
            self.destroy_lifecycle_publisher(pub)
        if self._records is not None:
            self._records.destroy()
        self._lamp_timers, self._lamp_subs, self._lamp_pubs = {}, [], {}
        self._records = None
        self._active, self._hold = False, Hold()
        if self.runtime is not None:
            self.runtime.close()
        self.runtime = None
        self.engine = None
        # frozen objects are never collected: let the released artifact's go (configure freezes
        # again what the next one loads)
        gc.unfreeze()

    # ---- inputs ------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_image(self, slot: str, msg, compressed: bool) -> None:
        self.engine.on_image(slot, msg, self._now(), compressed)

    def _on_joints(self, msg) -> None:
        self.engine.on_joints(msg, self._now())

    # ---- control tick ------------------------------------------------------------------------

    def _reset_counters(self) -> None:
        self._published = 0
        self._publish_times = deque(maxlen=200)
        self._e2e_ms = deque(maxlen=1000)
        self._fault = ('', '')   # (kind, reason); kind: '', 'stale', 'error', 'waiting'
        self._last_fault = ''
        self._reported = (0, 0, 0)
        self._skipped = 0         # control periods with no tick (the process was starved)
        self._last_tick = None

    def _on_tick(self) -> None:
        now = self._now()
        self._skipped += skipped_periods(self._last_tick, now, self.runtime.period)
        self._last_tick = now
        if self._hold.held is not None:  # ~/hold: no inference moves the robot until ~/resume
            position = self._hold.position()
            if position is not None:
                self._publish([position])
                self._publish_latency(None, position, now)
            return
        try:
            result = self.engine.tick(now)
        except Exception as exc:  # never let a tick kill the node
            self.get_logger().error(f'tick failed: {exc}\n{traceback.format_exc()}')
            result = self.engine.fault('error', f'{type(exc).__name__}: {exc}')
        self._set_fault(result.fault, result.reason)
        if result.inference is not None:
            self._records.inference(result.inference, self.runtime, self.engine)
        if result.command is None or self._hold.held is not None:  # ~/hold came meanwhile
            return
        points = [result.command]
        if result.fresh and self.config.trajectory_points > 1:
            t = self._now() - self.engine.t0
            points += list(self.runtime.lookahead(t, self.config.trajectory_points - 1,
                                                  start=result.command))
        self._publish(points, now)
        self._publish_latency(result, result.command, now)

    def _set_fault(self, kind: str, reason: str) -> None:
        if kind and reason != self._fault[1]:
            self.get_logger().warning(f'fault ({kind}): {reason}', throttle_duration_sec=2.0)
        if kind:
            self._last_fault = reason
        self._fault = (kind, reason)

    def _publish(self, points, tick: float | None = None) -> None:
        """One command message: with several points (trajectory_points), a timed trajectory
        stamped with the tick time and with velocities; one point: "start now"."""
        if not all(np.isfinite(p).all() for p in points):  # last line of defence
            return
        if self.config.output == 'joint_trajectory':
            timed = len(points) > 1
            msg = convert.trajectory(self.joint_names, points, self.runtime.period,
                                     stamp=tick if timed else None, velocities=timed)
        else:
            msg = convert.float_array(points[0], ','.join(self.joint_names))
        self._lamp_pubs['command'].publish(msg)
        self._published += 1
        self._publish_times.append(time.monotonic())

    def _publish_latency(self, result, command, now: float) -> None:
        """The record of a published command (`result` None: one of ~/hold), and its
        camera-to-command latency for the node's own statistics."""
        fresh = result is not None and result.fresh
        e2e = self._now() - result.stamp if fresh else float('nan')
        if fresh:
            self._e2e_ms.append(e2e * 1e3)
        self._records.command(result, command, now, self.runtime, self.engine,
                              self._published - 1, e2e)

    # ---- hold / resume -----------------------------------------------------------------------

    def _on_hold(self, request, response):
        """~/hold (node/hold.py): the joints where they are every tick, or one empty
        trajectory, until ~/resume."""
        from trajectory_msgs.msg import JointTrajectory
        engine = self.engine if self._active else None
        ok, message, publish = self._hold.request(
            self._active, self.config.hold_mode if engine else '',
            self.config.output if engine else '',
            engine.inputs.latest_joints() if engine else None,
            engine.last_safe if engine else None, self._now())
        if isinstance(publish, str):  # 'empty'
            msg = JointTrajectory()
            msg.joint_names = list(self.joint_names)
            self._lamp_pubs['command'].publish(msg)
        elif publish is not None:
            self._publish([publish])
        response.success, response.message = ok, message
        if ok and publish is not None:
            self.get_logger().warning(f'~/hold: {message}')
        return response

    def _on_resume(self, request, response):
        """~/resume: the policy drives again, from a new episode (fresh plan and filters)."""
        ok, message = self._hold.resume(self._active)
        if ok:
            self.engine.start(self._now())
            self.get_logger().warning(f'~/resume: {message}')
        response.success, response.message = ok, message
        return response

    # ---- diagnostics -------------------------------------------------------------------------

    def report(self) -> dict:
        """Plain-data health summary (what diagnostics and the profile topic publish)."""
        times = list(self._publish_times)
        recent = [t for t in times if t > time.monotonic() - 2.0]
        rate = (len(recent) - 1) / (recent[-1] - recent[0]) if len(recent) > 2 else 0.0
        profile = self.runtime.profile()
        inputs = self.engine.inputs
        rejected = sum(inputs.rejected.values())
        kind, reason = self._fault
        # WARN for inputs rejected since the last report, or more than one missed deadline or
        # skipped tick in it (one late tick in 22 is jitter, not something to chase).
        new_rejections = rejected > self._reported[0]
        new_misses = (profile['deadline_misses'] - self._reported[1] > 1
                      or self._skipped - self._reported[2] > 1)
        new_trouble = new_rejections or new_misses
        self._reported = (rejected, profile['deadline_misses'], self._skipped)
        if self._hold.held is not None:
            level = 'WARN'
            message = (f'held by ~/hold since {self._hold.held["since"]:.1f} s: the policy '
                       'does not move the robot; ~/resume starts a new episode')
        elif kind == 'stale':
            level, message = 'STALE', reason
        elif kind == 'error':
            level, message = 'ERROR', reason
        elif new_trouble:
            level = 'WARN'
            message = (f'rejected input: {inputs.last_rejection}' if new_rejections else
                       'deadlines missed or ticks skipped in the last second')
        else:
            level, message = 'OK', reason or f'publishing at {rate:.1f} Hz'
        if self.config.dry_run:
            message = f'DRY RUN (commands on {self.command_topic} only): {message}'
        e2e = np.array(self._e2e_ms)
        return {
            'level': level, 'message': message, 'artifact_id': self.runtime.id,
            'target_rate_hz': self.runtime.rate_hz, 'achieved_rate_hz': rate,
            'ages': inputs.ages(self._now()), 'sizes': inputs.sizes(), 'profile': profile,
            'e2e': {'p50_ms': float(np.percentile(e2e, 50)),
                    'p99_ms': float(np.percentile(e2e, 99))} if e2e.size else None,
            'stale_ticks': inputs.stale_ticks, 'rejected_total': rejected,
            'last_rejection': inputs.last_rejection, 'last_fault': self._last_fault,
            'published': self._published, 'skipped_ticks': self._skipped,
            'held': self._hold.held is not None, 'dry_run': bool(self.config.dry_run),
            'command_topic': self.command_topic,
            # this side's view of discovery: a publisher can see the node's subscription
            # before the node sees the publisher, and until then the node drops its samples
            'publishers': {sub.topic_name: sub.get_publisher_count() for sub in self._lamp_subs},
            'received': self._received.report(),
        }

    def _on_diagnostics(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        try:
            report = self.report()
            msg = DiagnosticArray()
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.status = [diagnostic_status(self.get_name(), self.runtime.device, report)]
            self._lamp_pubs['diagnostics'].publish(msg)
            values = profile_values(report)
            self._lamp_pubs['profile'].publish(
                convert.float_array(values, ','.join(PROFILE_LAYOUT)))
            line = self._status_line.due(report)
            if line:
                self.get_logger().info(line)
        except Exception as exc:
            if not self.context.ok():  # a stop shut the context down under this report
                return
            self.get_logger().error(f'diagnostics failed: {exc}\n{traceback.format_exc()}')


def autostart(node: VlaNode) -> bool:
    """configure + activate when the `autostart` parameter is set (no lifecycle manager)."""
    if not node.get_parameter('autostart').value:
        node.get_logger().info('unconfigured, waiting for a configure transition (autostart is '
                               'false): `lamp top --configure --activate` or a lifecycle '
                               'manager starts it; `-p autostart:=true` starts it by itself')
        return False
    if node.trigger_configure() != SUCCESS:
        node.get_logger().error('autostart: configure failed; staying unconfigured')
        return False
    return node.trigger_activate() == SUCCESS


def executor_for(execution: str):
    """async: every callback of the node is short (inference runs in the runtime's worker
    thread), so one thread serves them all. rclpy's MultiThreadedExecutor is costly here: its
    dispatch thread re-waits while a handed-off message is not yet taken and held the GIL most
    of the time with 3 cameras and joint states (py-spy), so on two cores the 22 Hz timer fired
    late and ticks were dropped, where one thread kept the rate.
    sync: inference runs inside the control tick, so lifecycle and parameter services need
    other threads to answer meanwhile."""
    if execution == 'async':
        return SingleThreadedExecutor()
    return MultiThreadedExecutor(num_threads=4)


def main(args=None) -> None:
    profile = use_lamp_profile()  # before rclpy.init: Fast DDS reads it then
    try:
        with rclpy.init(args=args):
            node = VlaNode()
            node.get_logger().info(f'Fast DDS profile: {profile or "none (not Fast DDS)"}')
            # chosen from the parameter at start (a later change of `execution` keeps it)
            executor = executor_for(node.get_parameter('execution').value)
            executor.add_node(node)
            autostart(node)
            try:
                executor.spin()
            except Exception:
                if node.context.ok():
                    raise
                # SIGTERM shut the context down under a running wait: a normal stop
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == '__main__':
    main()
