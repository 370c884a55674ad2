"""Live replay: the bag's inputs published to a running node at the recorded timing (scaled by
`rate`); what the node does with them is recorded and checked.

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

Timing is real here (scheduling, DDS, inference in a worker): the node's ticks fall between
the bag's frames where they fall, so its commands cannot be expected to equal the bag's. What
is checked is the running node itself: the session (the inputs as published, and the node's own
records of which of them it used and when each chunk arrived, node/records.py) is written as a
bag and replayed deterministically through the artifact the node runs (replay.py). `passed`
means the node computed, command for command, what the artifact computes from the inputs it
used. The bag's own commands are compared too, nearest in time (`recorded_*`), for information.
A node that publishes no command while the bag plays fails the replay with that reason.
"""

import os
import tempfile
import threading
import time

from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagWriter, read_bag, TYPESTORE
from lamp_ros.regress.record import message_class, qos_for
from lamp_ros.regress.recording import bag_layout
from lamp_ros.regress.replay import compare_commands, replay

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


def live_replay(bag: str, artifact: str, rate: float = 1.0, atol: float = 1e-5,
                rtol: float = 1e-4, discovery_timeout: float = DISCOVERY_TIMEOUT_S,
                session_out: str | None = None) -> dict:
    """Play `bag`'s inputs into the running node and check its commands (see the module
    docstring); the report has `discovery_s`, `commands_received`, and the bag's commands
    compared nearest in time as `recorded_*`. `session_out`: keep the session's bag there.
    LiveReplayError when the graph never forms or the node publishes no command."""
    if rate <= 0:
        raise ValueError(f'rate: must be > 0, got {rate}')
    if discovery_timeout <= 0:
        raise ValueError(f'discovery_timeout: must be > 0, got {discovery_timeout}')
    if session_out and os.path.exists(session_out):
        raise ValueError(f'{session_out}: exists; the session is written as a new bag')
    messages = read_bag(bag)
    layout = bag_layout(messages)
    inputs = [m for m in messages if m.topic != layout['command'] and
              m.topic in {t for t, _ in layout['cameras'].values()} | {layout['joints']}]
    if not inputs:
        raise LiveReplayError(f'{bag}: no camera or joint state message to play')
    recorded = [(m.t_ns, topics.command_positions(m.decode(), layout['command_type']))
                for m in messages if m.topic == layout['command']]
    command_type = layout['command_type'] or topics.TRAJECTORY
    command_topic = layout['command'] or DEFAULT_COMMAND_TOPIC
    with tempfile.TemporaryDirectory(prefix='lamp_live_') as scratch:
        out = session_out or os.path.join(scratch, 'session')
        played = _play(inputs, rate, discovery_timeout, command_topic, command_type, out)
        if not played['commands']:
            raise LiveReplayError(
                f'no command on {command_topic} during the {played["played_s"]:.1f} s replay '
                f'(matched after {played["discovery_s"]:.2f} s): is the node active, and does '
                'it accept the bag\'s inputs (its /diagnostics say)?')
        report = replay(out, artifact, atol=atol, rtol=rtol)
    report.pop('produced', None)
    report.update(mode='live', rate=rate, bag=bag, session_bag=session_out,
                  discovery_s=round(played['discovery_s'], 3),
                  played_s=round(played['played_s'], 3),
                  commands_received=len(played['commands']),
                  **_against_recording(played, recorded, inputs[0].t_ns, rate, atol, rtol))
    return report


def _against_recording(played: dict, recorded: list, t_first: int, rate: float,
                       atol: float, rtol: float) -> dict:
    """The node's commands against the bag's, each paired with the recorded command nearest
    in (scaled) bag time: informative, since live ticks fall where they fall."""
    expected, produced, times = [], [], []
    for t_live, positions in played['commands']:
        t_bag = t_first + (t_live - played['start']) * rate * 1e9
        nearest = min(recorded, key=lambda r: abs(r[0] - t_bag)) if recorded else None
        if nearest is not None and abs(nearest[0] - t_bag) < MATCH_WINDOW_S * 1e9:
            expected.append(nearest[1])
            produced.append(positions)
            times.append((t_live - played['start']) * rate)
    against = compare_commands(produced, expected, atol, rtol, times)
    return {'recorded_commands_matched': len(produced),
            'recorded_within_tolerance_pct': against['within_tolerance_pct'],
            'recorded_max_abs_error': against['max_abs_error']}


def _play(inputs, rate: float, discovery_timeout: float, command_topic: str,
          command_type: str, out: str) -> dict:
    """Publish `inputs` on the live clock and write the session bag `out`: the inputs as
    published and everything the node publishes about its work."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from diagnostic_msgs.msg import DiagnosticArray

    t_first = inputs[0].t_ns
    t_last = inputs[-1].t_ns

    from lamp_ros.node.dds_profile import use_lamp_profile
    use_lamp_profile()  # before the first participant: Fast DDS reads it then
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node('lamp_live_replay', context=context)
    executor = SingleThreadedExecutor(context=context)
    spinner = None
    writer = BagWriter(out)
    lock = threading.Lock()
    commands = []

    def keep(topic, msgtype):
        def callback(raw):
            now = node.get_clock().now().nanoseconds
            with lock:
                writer.write(topic, msgtype, now, raw)
            if topic == command_topic:
                msg = TYPESTORE.deserialize_cdr(bytes(raw), msgtype)
                commands.append((time.monotonic(), topics.command_positions(msg, msgtype)))
        return callback
    try:
        pubs = {}
        for m in inputs:
            if m.topic not in pubs:
                pubs[m.topic] = node.create_publisher(message_class(m.msgtype), m.topic,
                                                      qos_profile_sensor_data)
        subscription = node.create_subscription(
            message_class(command_type), command_topic, keep(command_topic, command_type), 50,
            raw=True)
        for topic, msgtype in topics.NODE_RECORDS.items():
            node.create_subscription(message_class(msgtype), topic, keep(topic, msgtype),
                                     qos_for(msgtype, topic), raw=True)
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
            raw = bytes(TYPESTORE.serialize_cdr(msg, m.msgtype))
            with lock:
                writer.write(m.topic, m.msgtype, node.get_clock().now().nanoseconds, raw)
            pubs[m.topic].publish(raw)  # raw CDR
        end = start + ((t_last - t_first) * 1e-9 + TAIL_S) / rate
        while time.monotonic() < end:  # the commands of the bag's last ticks
            time.sleep(min(0.01, max(0.0, end - time.monotonic())))
    finally:
        executor.shutdown()
        if spinner is not None:
            spinner.join()  # a spin thread alive at exit aborts the process in rclpy's C++
        node.destroy_node()
        rclpy.shutdown(context=context)
        with lock:
            writer.close()
    return {'commands': commands, 'start': start, 'discovery_s': discovery_s,
            'played_s': (t_last - t_first) * 1e-9 / rate}
