"""The node's records on the wire (their rows and fields: node/records.py).

One object owns the publishers of what vla_node says about its own work, so the node's tick
calls one method per event: a command published (its latency row), an inference merged (its
row, and the episode's state after it), a configuration made (the latched session).
"""

import json

from lamp_ros.node import convert, records
from lamp_ros.runtime import episode_state

# Samples each record publisher keeps for a reader that has not confirmed them yet: a recorder
# kept off the CPU for a few seconds must not lose rows (22 Hz: about 4.5 s).
HISTORY = 100


class RecordPublisher:
    """`~/command_latency`, `~/inference`, `~/episode_state` (lifecycle publishers: quiet
    while inactive) and `~/session` (transient local, published at configure)."""

    def __init__(self, node):
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Float64MultiArray, String, UInt8MultiArray
        self._node = node
        self._pubs = {
            'latency': node.create_lifecycle_publisher(Float64MultiArray, '~/command_latency',
                                                       HISTORY),
            'inference': node.create_lifecycle_publisher(Float64MultiArray, '~/inference',
                                                         HISTORY),
            'episode_state': node.create_lifecycle_publisher(UInt8MultiArray,
                                                             '~/episode_state', HISTORY)}
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._session = node.create_publisher(String, '~/session', latched)

    def topics(self) -> dict:
        """name -> resolved topic of each record publisher (what the session names)."""
        return {name: pub.topic_name for name, pub in self._pubs.items()}

    def session(self, data: dict) -> None:
        """~/session: the configuration every episode of this configuration runs with."""
        from std_msgs.msg import String
        msg = String()
        msg.data = json.dumps(data)
        self._session.publish(msg)

    def command(self, result, command, now: float, runtime, engine, index: int,
                e2e: float) -> None:
        """The row of one published command (`result` None: one of ~/hold; `command`: the
        positions): when its inputs were taken, the latency, whether it started an inference,
        the header stamp of every input used, so that a replay rebuilds the exact observation,
        and the command itself."""
        fresh = result is not None and result.fresh
        inferred = bool(fresh and runtime.last_inferred)
        delay = runtime.last_delay if inferred and runtime.rtc else None
        values, label = records.latency_row(result, now, engine.t0, index, inferred, delay,
                                            engine.inputs.slots, command, e2e,
                                            held=result is None)
        self._pubs['latency'].publish(convert.float_array(values, label))

    def inference(self, record, runtime, engine) -> None:
        """The inference whose chunk (or failure) a tick received, and after a merged chunk
        the episode's state: what a replay needs to run an asynchronous episode, or one it
        joins midway, exactly as it went."""
        from std_msgs.msg import UInt8MultiArray
        values, label = records.inference_row(record, engine.t0, engine.inputs.slots)
        self._pubs['inference'].publish(convert.float_array(values, label))
        if record.error:
            return
        msg = UInt8MultiArray()
        msg.data = episode_state.to_bytes(episode_state.capture(runtime), {
            'artifact_id': runtime.id, 'tick_s': repr(record.merged),
            'episode_start_s': repr(engine.t0), 'inference_index': str(record.index)})
        self._pubs['episode_state'].publish(msg)

    def destroy(self) -> None:
        for pub in self._pubs.values():
            self._node.destroy_lifecycle_publisher(pub)
        self._node.destroy_publisher(self._session)
        self._pubs = {}
