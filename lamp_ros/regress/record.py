"""`lamp record`: the node's inputs and outputs from the live ROS graph into a rosbag2.

Raw subscriptions hand over the CDR bytes as received, so the bag holds exactly what was on the
wire; the receive time (ROS clock) is the bag timestamp. Sensor topics are subscribed with the
sensor-data QoS (best effort), which also receives from reliable publishers, with a queue deep
enough (RECORDER_DEPTH) that a recorder busy writing does not drop what already arrived; the
node's own records are reliable.

What to record follows the node: its `~/session` message (transient local, so it arrives
whenever the recorder starts) names the topics it reads, and the recorder subscribes to those
as soon as it has it, whatever the robot calls its cameras. Before that (or with no lamp node
at all) it records the default topics (regress/topics.py).
"""

import importlib
import json
import os
import signal
import threading
import time

from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagWriter

RECORDER_DEPTH = 100  # per topic: a few seconds of every stream at robot rates


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' -> sensor_msgs.msg.Image (rclpy's generated class)."""
    package, _, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{package}.msg'), name)


def qos_for(msgtype: str, topic: str):
    """The subscription QoS that hears every sample of `topic`: transient local for the
    node's session, sensor data (best effort, deep) for sensors, reliable for the rest."""
    from rclpy.qos import (DurabilityPolicy, QoSProfile, qos_profile_sensor_data,
                           ReliabilityPolicy)
    if topic == topics.SESSION_TOPIC:  # the node publishes it once, transient local
        return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL)
    if msgtype in topics.SENSORS:
        return QoSProfile(depth=RECORDER_DEPTH, reliability=qos_profile_sensor_data.reliability,
                          durability=qos_profile_sensor_data.durability,
                          history=qos_profile_sensor_data.history)
    return RECORDER_DEPTH


def record(out: str, duration: float, storage: str = 'mcap', topic_types=None,
           context=None, on_start=None, on_match=None, on_session=None) -> dict:
    """Record `topic_types` (default: every topic the node uses) for `duration` seconds, or
    until SIGINT / SIGTERM (Ctrl-C) when it runs its own ROS context in the main thread: the
    bag is closed either way and `stopped` says which ended it. `on_match(topic)` is called
    once per topic when its subscription is first matched by a publisher: from then on the
    recording holds what that publisher sends (whoever starts the node after the recorder
    can wait for it instead of guessing how long discovery takes). `on_session(session)` is
    called when the node's `~/session` arrives (its topics are then recorded too)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions

    if os.path.exists(out):
        raise ValueError(f'{out}: exists; lamp record writes a new bag folder (give another '
                         '--out, or remove that one)')
    if not duration > 0:
        raise ValueError(f'duration: must be > 0 seconds, got {duration}')
    topic_types = dict(topic_types or topics.recorded())
    own = context is None
    if own:
        from lamp_ros.node.dds_profile import use_lamp_profile
        use_lamp_profile()  # before the first participant: raw frames arrive whole
        context = rclpy.Context()
        # our own handlers below: rclpy's would shut the context down under the spin loop
        rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    interrupted = threading.Event()
    previous = {}
    if own and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: interrupted.set())
    writer = BagWriter(out, storage)
    lock = threading.Lock()
    counts = {}
    node = Node('lamp_recorder', context=context)
    subscriptions, unmatched = {}, {}

    def subscribe(topic: str, msgtype: str) -> None:
        if topic in subscriptions:
            return

        def callback(raw: bytes):
            t_ns = node.get_clock().now().nanoseconds
            with lock:
                writer.write(topic, msgtype, t_ns, raw)
                counts[topic] = counts.get(topic, 0) + 1
            if topic == topics.SESSION_TOPIC:
                follow(raw)
        subscriptions[topic] = unmatched[topic] = node.create_subscription(
            message_class(msgtype), topic, callback, qos_for(msgtype, topic), raw=True)

    def follow(raw: bytes) -> None:
        from lamp_ros.regress.bag import TYPESTORE
        try:
            session = json.loads(TYPESTORE.deserialize_cdr(raw, topics.STRING).data)
        except ValueError:
            return  # not a lamp session: the default topics stay what is recorded
        for topic, msgtype in topics.session_inputs(session).items():
            subscribe(topic, msgtype)
        if on_session:
            on_session(session)

    for topic, msgtype in topic_types.items():
        subscribe(topic, msgtype)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    if on_start:
        on_start()
    end = time.monotonic() + duration
    try:
        while time.monotonic() < end and not interrupted.is_set():
            executor.spin_once(timeout_sec=0.05)
            for topic in [t for t, sub in unmatched.items() if sub.get_publisher_count()]:
                del unmatched[topic]
                if on_match:
                    on_match(topic)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        executor.shutdown()
        node.destroy_node()
        with lock:
            writer.close()
        if own:
            rclpy.shutdown(context=context)
    return {'bag': out, 'storage': storage, 'messages': writer.count, 'topics': counts,
            'stopped': 'signal' if interrupted.is_set() else 'duration'}
