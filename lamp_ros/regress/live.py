"""Live replay: the bag's inputs published to a running node at the recorded timing (scaled by
`rate`), and what the node publishes recorded and compared with the bag's commands.

Header stamps are moved onto the live clock (bag time + the offset between the bag's start and
the start of the playback), as a live robot's would be; otherwise the node would see stamps
from the recording day and judge every observation stale or from the future.
Timing is real here (scheduling, DDS, inference in a worker), so commands are matched to the
recorded command nearest in (scaled) bag time and compared with the same tolerance as the
deterministic mode; expect looser agreement than there.
"""

import threading
import time

from lamp_ros.regress import topics
from lamp_ros.regress.bag import read_bag, TYPESTORE
from lamp_ros.regress.record import message_class
from lamp_ros.regress.replay import bag_layout, compare_commands


def live_replay(bag: str, rate: float = 1.0, atol: float = 1e-5, rtol: float = 1e-4,
                settle: float = 1.0) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data

    if rate <= 0:
        raise ValueError(f'rate: must be > 0, got {rate}')
    messages = read_bag(bag)
    layout = bag_layout(messages)
    inputs = [m for m in messages if m.topic != layout['command'] and
              m.topic in {t for t, _ in layout['cameras'].values()} | {topics.JOINTS_TOPIC}]
    recorded = [(m.t_ns, topics.command_positions(m.decode(), layout['command_type']))
                for m in messages if m.topic == layout['command']]
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node('lamp_live_replay', context=context)
    pubs = {}
    for m in inputs:
        if m.topic not in pubs:
            pubs[m.topic] = node.create_publisher(message_class(m.msgtype), m.topic,
                                                  qos_profile_sensor_data)
    received = []
    command_type = layout['command_type'] or topics.TRAJECTORY
    command_topic = layout['command'] or '/vla_policy/joint_trajectory'
    node.create_subscription(
        message_class(command_type), command_topic,
        lambda msg: received.append((time.monotonic(),
                                     topics.command_positions(msg, command_type))), 50)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    time.sleep(settle)  # discovery
    start, t_first = time.monotonic(), inputs[0].t_ns
    clock_start = node.get_clock().now().nanoseconds
    for m in inputs:
        due = start + (m.t_ns - t_first) * 1e-9 / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        msg = m.decode()
        stamp = msg.header.stamp
        bag_ns = stamp.sec * 10**9 + stamp.nanosec
        live_ns = clock_start + int((bag_ns - t_first) / rate)
        stamp.sec, stamp.nanosec = live_ns // 10**9, live_ns % 10**9
        pubs[m.topic].publish(bytes(TYPESTORE.serialize_cdr(msg, m.msgtype)))  # raw CDR
    time.sleep(0.2)
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown(context=context)
    # Match each live command to the recorded command nearest in scaled bag time.
    expected, produced, times = [], [], []
    for t_live, positions in received:
        t_bag = t_first + (t_live - start) * rate * 1e9
        nearest = min(recorded, key=lambda r: abs(r[0] - t_bag)) if recorded else None
        if nearest is not None and abs(nearest[0] - t_bag) < 1e9 / 22:
            expected.append(nearest[1])
            produced.append(positions)
            times.append((t_live - start) * rate)
    report = compare_commands(produced, expected, atol, rtol, times)
    report.update(mode='live', rate=rate, atol=atol, rtol=rtol, bag=bag,
                  commands_received=len(received))
    return report
