"""`vla_node`: the lifecycle node that drives a robot with a compiled artifact.

configure loads the artifact through the Runtime (a refusal is logged with its reason and the
node stays unconfigured), checks it against the parameters, and creates publishers,
subscriptions and timers (timers cancelled); activate starts an episode and the control timer;
deactivate stops it; cleanup releases everything. The control tick takes the freshest
consistent observation, steps the runtime and publishes one command; on stale or rejected input,
an inference error or a non-finite result it holds the last safe command (or publishes nothing
with on_fault=silent) and says why on /diagnostics. It never publishes NaN.
"""

from collections import deque
import time
import traceback

import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.qos import qos_profile_sensor_data
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult

from lamp_ros.node import convert
from lamp_ros.node.diagnostics import diagnostic_status, PROFILE_LAYOUT, profile_values
from lamp_ros.node.inputs import InputCache
from lamp_ros.node.params import check, NodeConfig, PARAMETERS

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


class VlaNode(LifecycleNode):
    def __init__(self, name: str = 'vla_policy', **kwargs):
        super().__init__(name, **kwargs)
        for key, (default, doc) in PARAMETERS.items():
            self.declare_parameter(key, default, ParameterDescriptor(description=doc))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.runtime = None
        self.config = None
        self.inputs = None
        self._lamp_pubs, self._lamp_subs, self._lamp_timers = {}, [], {}
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
        self.get_logger().info(f'artifact {self.runtime.id[:16]} loaded ({self.runtime.device}, '
                               f'{self.config.execution}); {len(self._lamp_subs)} subscriptions')
        return SUCCESS

    def _configure(self) -> None:
        from lamp_ros.runtime import Runtime
        cfg = self.config = self._read_config()
        for name, value in cfg.values.items():
            reason = check(name, value)
            if reason:
                raise ValueError(reason)
        self.runtime = Runtime.load(cfg.artifact, device=cfg.device or None,
                                    execution=cfg.execution, overrides=cfg.overrides())
        artifact_joints = list(self.runtime.joint_names)
        joints = [j for j in cfg.joint_names if j] or artifact_joints
        if joints != artifact_joints:
            raise ValueError(f'joint_names {joints} do not match the artifact ABI '
                             f'{artifact_joints}')
        self.joint_names = joints
        slots = cfg.camera_topics
        unknown = sorted(set(slots) - set(self.runtime.camera_slots))
        if unknown:
            raise ValueError(f'cameras: slots {unknown} are not in the artifact ABI '
                             f'{list(self.runtime.camera_slots)}')
        self.inputs = InputCache(list(slots), cfg.max_obs_age_s, cfg.max_skew_s)
        self._create_io(cfg, slots)

    def _create_io(self, cfg, slots) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from sensor_msgs.msg import CompressedImage, Image, JointState
        from std_msgs.msg import Float64MultiArray
        from trajectory_msgs.msg import JointTrajectory
        if cfg.output == 'joint_trajectory':
            out_type, default_topic = JointTrajectory, '~/joint_trajectory'
        else:
            out_type, default_topic = Float64MultiArray, '~/commands'
        self._lamp_pubs = {
            'command': self.create_lifecycle_publisher(out_type, cfg.output_topic or
                                                       default_topic, 10),
            'latency': self.create_lifecycle_publisher(Float64MultiArray, '~/command_latency',
                                                       10),
            'profile': self.create_lifecycle_publisher(Float64MultiArray, '~/profile', 10),
            'diagnostics': self.create_lifecycle_publisher(DiagnosticArray, '/diagnostics', 10),
        }
        inputs = ReentrantCallbackGroup()
        compressed = cfg.image_transport == 'compressed'
        for slot, topic in slots.items():
            self._lamp_subs.append(self.create_subscription(
                CompressedImage if compressed else Image, topic,
                lambda msg, slot=slot: self._on_image(slot, msg, compressed),
                qos_profile_sensor_data, callback_group=inputs))
        self._lamp_subs.append(self.create_subscription(
            JointState, cfg.joint_states_topic, self._on_joints, qos_profile_sensor_data,
            callback_group=inputs))
        self._lamp_timers = {
            'control': self.create_timer(1.0 / cfg.rate_hz, self._on_tick,
                                         callback_group=MutuallyExclusiveCallbackGroup()),
            'diagnostics': self.create_timer(1.0, self._on_diagnostics,
                                             callback_group=MutuallyExclusiveCallbackGroup()),
        }
        for timer in self._lamp_timers.values():
            timer.cancel()

    def on_activate(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('activating: new episode')
        self.runtime.reset()
        self._reset_counters()
        self._t0 = self._now()
        for timer in self._lamp_timers.values():
            timer.reset()
        return super().on_activate(state)

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self.get_logger().info('deactivating')
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
        self._lamp_timers, self._lamp_subs, self._lamp_pubs = {}, [], {}
        if self.runtime is not None:
            self.runtime.close()
        self.runtime = None
        self.inputs = None

    # ---- inputs ------------------------------------------------------------------------------

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _on_image(self, slot: str, msg, compressed: bool) -> None:
        try:
            rgb = convert.compressed_to_rgb(msg) if compressed else convert.image_to_rgb(msg)
        except convert.Rejected as exc:
            self.inputs.reject(f'image.{slot}', str(exc))
            return
        self.inputs.put_image(slot, rgb, convert.stamp_seconds(msg.header.stamp), self._now())

    def _on_joints(self, msg) -> None:
        try:
            q = convert.joint_positions(msg, self.joint_names)
        except convert.Rejected as exc:
            self.inputs.reject('joint_states', str(exc))
            return
        self.inputs.put_joints(q, convert.stamp_seconds(msg.header.stamp), self._now())

    # ---- control tick ------------------------------------------------------------------------

    def _reset_counters(self) -> None:
        self._published = 0
        self._publish_times = deque(maxlen=200)
        self._e2e_ms = deque(maxlen=1000)
        self._last_safe = None
        self._fault = ('', '')   # (kind, reason); kind: '', 'stale', 'error', 'waiting'
        self._last_fault = ''
        self._reported = (0, 0)

    def _on_tick(self) -> None:
        try:
            self._tick()
        except Exception as exc:  # never let a tick kill the node
            self._set_fault('error', f'{type(exc).__name__}: {exc}')
            self.get_logger().error(f'tick failed: {exc}\n{traceback.format_exc()}')
            self._hold()

    def _tick(self) -> None:
        now = self._now()
        obs, stamp, reason = self.inputs.observation(now, self.config.prompt)
        if obs is None:
            self.inputs.stale_ticks += 1
            self._set_fault('stale', reason)
            self._hold()
            return
        start = time.perf_counter()
        try:
            command = self.runtime.step(obs, now - self._t0, stamp - self._t0)
        except ValueError as exc:  # bad observation content: the runtime names the field
            self._set_fault('error', f'rejected observation: {exc}')
            self._hold()
            return
        compute = time.perf_counter() - start
        if command is None:
            self._set_fault('waiting', 'waiting for the first chunk')
            self._hold()
            return
        if not np.isfinite(command).all():
            self._set_fault('error', 'non-finite command from the policy')
            self._hold()
            return
        self._set_fault('', '')
        self._last_safe = np.array(command, dtype=np.float64)
        lookahead = self.runtime.lookahead(now - self._t0, self.config.points_per_command - 1)
        self._publish([self._last_safe, *lookahead])
        self._publish_latency(stamp, compute)

    def _hold(self) -> None:
        if self.config.on_fault == 'hold' and self._last_safe is not None:
            self._publish([self._last_safe])

    def _set_fault(self, kind: str, reason: str) -> None:
        if kind and reason != self._fault[1]:
            self.get_logger().warning(f'fault ({kind}): {reason}', throttle_duration_sec=2.0)
        if kind:
            self._last_fault = reason
        self._fault = (kind, reason)

    def _publish(self, points) -> None:
        if not all(np.isfinite(p).all() for p in points):  # last line of defence
            return
        if self.config.output == 'joint_trajectory':
            msg = convert.trajectory(self.joint_names, points, 1.0 / self.config.rate_hz)
        else:
            msg = convert.float_array(points[0], ','.join(self.joint_names))
        self._lamp_pubs['command'].publish(msg)
        self._published += 1
        self._publish_times.append(time.monotonic())

    def _publish_latency(self, stamp: float, compute: float) -> None:
        e2e = self._now() - stamp
        self._e2e_ms.append(e2e * 1e3)
        self._lamp_pubs['latency'].publish(convert.float_array(
            [stamp, e2e, compute, float(self.runtime.last_inferred)],
            'input_stamp_s,e2e_latency_s,compute_s,inferred'))

    # ---- diagnostics -------------------------------------------------------------------------

    def report(self) -> dict:
        """Plain-data health summary (what diagnostics and the profile topic publish)."""
        times = list(self._publish_times)
        recent = [t for t in times if t > time.monotonic() - 2.0]
        rate = (len(recent) - 1) / (recent[-1] - recent[0]) if len(recent) > 2 else 0.0
        profile = self.runtime.profile()
        rejected = sum(self.inputs.rejected.values())
        kind, reason = self._fault
        new_trouble = (rejected, profile['deadline_misses']) != self._reported
        self._reported = (rejected, profile['deadline_misses'])
        if kind == 'stale':
            level, message = 'STALE', reason
        elif kind == 'error':
            level, message = 'ERROR', reason
        elif new_trouble:
            level = 'WARN'
            message = (f'rejected input: {self.inputs.last_rejection}' if rejected else
                       'deadline missed in the last second')
        else:
            level, message = 'OK', reason or f'publishing at {rate:.1f} Hz'
        e2e = np.array(self._e2e_ms)
        return {
            'level': level, 'message': message, 'artifact_id': self.runtime.id,
            'target_rate_hz': self.config.rate_hz, 'achieved_rate_hz': rate,
            'ages': self.inputs.ages(self._now()), 'profile': profile,
            'e2e': {'p50_ms': float(np.percentile(e2e, 50)),
                    'p99_ms': float(np.percentile(e2e, 99))} if e2e.size else None,
            'stale_ticks': self.inputs.stale_ticks, 'rejected_total': rejected,
            'last_rejection': self.inputs.last_rejection, 'last_fault': self._last_fault,
            'published': self._published,
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
        except Exception as exc:
            self.get_logger().error(f'diagnostics failed: {exc}\n{traceback.format_exc()}')


def autostart(node: VlaNode) -> bool:
    """configure + activate when the `autostart` parameter is set (no lifecycle manager)."""
    if not node.get_parameter('autostart').value:
        return False
    if node.trigger_configure() != SUCCESS:
        node.get_logger().error('autostart: configure failed; staying unconfigured')
        return False
    return node.trigger_activate() == SUCCESS


def main(args=None) -> None:
    try:
        with rclpy.init(args=args):
            node = VlaNode()
            executor = MultiThreadedExecutor(num_threads=4)
            executor.add_node(node)
            autostart(node)
            executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass


if __name__ == '__main__':
    main()
