"""Live replay: the bag's inputs published to a running node at the recorded timing (scaled by
`rate`), and what the node publishes recorded and compared with the bag's commands.

Nothing is published before the graph is there: every input publisher must be matched by a
subscription (the node's) and the command subscription by a publisher, and the node must say
on /diagnostics that it sees a publisher on each topic it reads (`publishers.<topic>`:
discovery matches the two sides apart, and the node drops samples from a publisher it has not
matched yet), or the replay fails after `discovery_timeout` seconds naming the topics nobody
serves. A fixed pause in its place was a coin toss: on a loaded machine discovery outlasts it,
and the node then sees nothing.

Header stamps are moved onto the live clock (bag time + the offset between the bag's start and
the start of the playback), as a live robot's would be; otherwise the node would see stamps
from the recording day and judge every observation stale or from the future.
Timing is real here (scheduling, DDS, inference in a worker), so commands are matched to the
recorded command nearest in (scaled) bag time and compared with the same tolerance as the
deterministic mode; expect looser agreement than there. A node that publishes no command while
the bag plays fails the replay with that reason.
"""

import threading
import time

from lamp_ros.regress import topics
from lamp_ros.regress.bag import read_bag, TYPESTORE
from lamp_ros.regress.record import message_class
from lamp_ros.regress.replay import bag_layout, compare_commands

DISCOVERY_TIMEOUT_S = 20.0
DEFAULT_COMMAND_TOPIC = '/vla_policy/joint_trajectory'
# After the bag's last message, commands still on their way are awaited this long (bag time at
# rate 1): one control period and a half at 22 Hz is enough for the last tick's command.
TAIL_S = 0.25
# A live command is paired with the recorded command nearest in bag time within this window.
MATCH_WINDOW_S = 1.0 / 22
CHECK_HINT = 'is vla_node active and are ROS_DOMAIN_ID / ROS_AUTOMATIC_DISCOVERY_RANGE the same?'


class LiveReplayError(RuntimeError):
    """The replay could not be run or heard nothing back; the message says why."""


def unmatched_endpoints(publishers: dict, subscription) -> list:
    """What nobody serves yet: 'no subscriber on T1, T2' for the publishers without a matched
    subscription, 'no publisher on T' for the command subscription without one."""
    lonely = [topic for topic, pub in sorted(publishers.items())
              if pub.get_subscription_count() == 0]
    missing = [f'no subscriber on {", ".join(lonely)}'] if lonely else []
    if subscription.get_publisher_count() == 0:
        missing.append(f'no publisher on {subscription.topic_name}')
    return missing


def unmatched_at_node(diagnostics: list, topics_published) -> list | None:
    """The published topics the node's newest /diagnostics report with no publisher (its
    `publishers.<topic>` values: the node's side of discovery), or None while no report with
    them has come."""
    for msg in reversed(diagnostics):
        for status in msg.status:
            counts = {v.key[len('publishers.'):]: v.value for v in status.values
                      if v.key.startswith('publishers.')}
            if counts:
                return sorted(t for t in topics_published if counts.get(t) == '0')
    return None


def wait_for_node(diagnostics: list, topics_published, timeout: float) -> float:
    """Seconds until the node says, on /diagnostics, that it sees a publisher on every topic
    it reads that the replay publishes. A publisher can match the node's subscription before
    the node matches the publisher, and until then the node drops what it is sent: a loaded
    machine showed seconds between the two. LiveReplayError naming what is still unmatched
    after `timeout`."""
    start = time.monotonic()
    while True:
        missing = unmatched_at_node(diagnostics, topics_published)
        waited = time.monotonic() - start
        if missing == []:
            return waited
        if waited >= timeout:
            what = ('no /diagnostics from the node saying which publishers it sees'
                    if missing is None else
                    f'the node sees no publisher on {", ".join(missing)} (its /diagnostics)')
            raise LiveReplayError(f'{what} after {timeout:.0f} s: {CHECK_HINT}')
        time.sleep(0.05)


def wait_for_graph(publishers: dict, subscription, timeout: float) -> float:
    """Seconds until every endpoint is matched (see `unmatched_endpoints`); LiveReplayError
    naming the unmatched ones after `timeout`."""
    start = time.monotonic()
    while True:
        missing = unmatched_endpoints(publishers, subscription)
        waited = time.monotonic() - start
        if not missing:
            return waited
        if waited >= timeout:
            raise LiveReplayError(f'{"; ".join(missing)} after {timeout:g} s: {CHECK_HINT}')
        time.sleep(0.02)


def live_replay(bag: str, rate: float = 1.0, atol: float = 1e-5, rtol: float = 1e-4,
                discovery_timeout: float = DISCOVERY_TIMEOUT_S) -> dict:
    """Play `bag`'s inputs into the running node; the comparison report, with `discovery_s`,
    `commands_received` and `commands_matched`. LiveReplayError when the graph never forms or
    the node publishes no command while the bag plays."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from diagnostic_msgs.msg import DiagnosticArray

    if rate <= 0:
        raise ValueError(f'rate: must be > 0, got {rate}')
    if discovery_timeout <= 0:
        raise ValueError(f'discovery_timeout: must be > 0, got {discovery_timeout}')
    messages = read_bag(bag)
    layout = bag_layout(messages)
    inputs = [m for m in messages if m.topic != layout['command'] and
              m.topic in {t for t, _ in layout['cameras'].values()} | {topics.JOINTS_TOPIC}]
    recorded = [(m.t_ns, topics.command_positions(m.decode(), layout['command_type']))
                for m in messages if m.topic == layout['command']]
    command_type = layout['command_type'] or topics.TRAJECTORY
    command_topic = layout['command'] or DEFAULT_COMMAND_TOPIC
    t_first = inputs[0].t_ns
    t_last = max([m.t_ns for m in inputs] + [t for t, _ in recorded])

    from lamp_ros.node.dds_profile import use_lamp_profile
    use_lamp_profile()  # before the first participant: Fast DDS reads it then
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node('lamp_live_replay', context=context)
    executor = SingleThreadedExecutor(context=context)
    spinner = None
    received = []
    try:
        pubs = {}
        for m in inputs:
            if m.topic not in pubs:
                pubs[m.topic] = node.create_publisher(message_class(m.msgtype), m.topic,
                                                      qos_profile_sensor_data)
        subscription = node.create_subscription(
            message_class(command_type), command_topic,
            lambda msg: received.append((time.monotonic(),
                                         topics.command_positions(msg, command_type))), 50)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        diagnostics = []
        node.create_subscription(DiagnosticArray, '/diagnostics', diagnostics.append, 10)
        discovery_s = wait_for_graph(pubs, subscription, discovery_timeout)
        discovery_s += wait_for_node(diagnostics, set(pubs),
                                     max(discovery_timeout - discovery_s, 1.0))
        start = time.monotonic()
        clock_start = node.get_clock().now().nanoseconds
        for m in inputs:
            delay = start + (m.t_ns - t_first) * 1e-9 / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the bag's own timeline, not a wait for the other side
            msg = m.decode()
            stamp = msg.header.stamp
            bag_ns = stamp.sec * 10**9 + stamp.nanosec
            live_ns = clock_start + int((bag_ns - t_first) / rate)
            stamp.sec, stamp.nanosec = live_ns // 10**9, live_ns % 10**9
            pubs[m.topic].publish(bytes(TYPESTORE.serialize_cdr(msg, m.msgtype)))  # raw CDR
        end = start + ((t_last - t_first) * 1e-9 + TAIL_S) / rate
        while time.monotonic() < end:  # the commands of the bag's last ticks
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))
    finally:
        executor.shutdown()
        if spinner is not None:
            spinner.join()  # a spin thread alive at exit aborts the process in rclpy's C++
        node.destroy_node()
        rclpy.shutdown(context=context)
    played_s = (t_last - t_first) * 1e-9 / rate
    if not received:
        raise LiveReplayError(f'no command on {command_topic} during the {played_s:.1f} s '
                              f'replay (matched after {discovery_s:.2f} s): is the node '
                              'active, and does it accept the bag\'s inputs (its /diagnostics '
                              'say)?')
    # Match each live command to the recorded command nearest in scaled bag time.
    expected, produced, times = [], [], []
    for t_live, positions in received:
        t_bag = t_first + (t_live - start) * rate * 1e9
        nearest = min(recorded, key=lambda r: abs(r[0] - t_bag)) if recorded else None
        if nearest is not None and abs(nearest[0] - t_bag) < MATCH_WINDOW_S * 1e9:
            expected.append(nearest[1])
            produced.append(positions)
            times.append((t_live - start) * rate)
    report = compare_commands(produced, expected, atol, rtol, times)
    report.update(mode='live', rate=rate, atol=atol, rtol=rtol, bag=bag,
                  discovery_s=round(discovery_s, 3), played_s=round(played_s, 3),
                  commands_received=len(received), commands_matched=len(produced))
    return report
