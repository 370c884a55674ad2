"""`lamp record`: the node's inputs and outputs from the live ROS graph into a rosbag2.

Raw subscriptions hand over the CDR bytes as received, so the bag holds exactly what was on the
wire; the receive time (ROS clock) is the bag timestamp. Sensor topics are subscribed with the
sensor-data QoS (best effort), which also receives from reliable publishers, with a queue deep
enough (RECORDER_DEPTH) that a recorder busy writing does not drop what already arrived.
"""

import importlib
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


def record(out: str, duration: float, storage: str = 'mcap', topic_types=None,
           context=None, on_start=None, on_match=None) -> dict:
    """Record `topic_types` (default: every topic the node uses) for `duration` seconds, or
    until SIGINT / SIGTERM (Ctrl-C) when it runs its own ROS context in the main thread: the
    bag is closed either way and `stopped` says which ended it. `on_match(topic)` is called
    once per topic when its subscription is first matched by a publisher: from then on the
    recording holds what that publisher sends (whoever starts the node after the recorder
    can wait for it instead of guessing how long discovery takes)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, qos_profile_sensor_data
    from rclpy.signals import SignalHandlerOptions

    topic_types = topic_types or topics.recorded()
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

    def make_callback(topic, msgtype):
        def callback(raw: bytes):
            t_ns = node.get_clock().now().nanoseconds
            with lock:
                writer.write(topic, msgtype, t_ns, raw)
                counts[topic] = counts.get(topic, 0) + 1
        return callback

    sensor = QoSProfile(depth=RECORDER_DEPTH, reliability=qos_profile_sensor_data.reliability,
                        durability=qos_profile_sensor_data.durability,
                        history=qos_profile_sensor_data.history)
    unmatched = {}
    for topic, msgtype in topic_types.items():
        qos = sensor if msgtype in (topics.IMAGE, topics.COMPRESSED, topics.JOINT_STATE) \
            else RECORDER_DEPTH
        unmatched[topic] = node.create_subscription(
            message_class(msgtype), topic, make_callback(topic, msgtype), qos, raw=True)
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
