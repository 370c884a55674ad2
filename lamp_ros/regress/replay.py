"""Deterministic replay: the bag's inputs through an artifact on the bag's own timeline.

Messages are fed in receive order to the same ControlEngine the node uses (same conversion,
same input checks, same hold-on-fault), and the engine ticks at each recorded command's time;
the produced command is compared with the recorded one joint by joint (|a - b| <= atol +
rtol * |b|). No wall clock is involved.
When the bag holds the node's /vla_policy/command_latency messages (one per command, with the
header stamp of every input the node used), each tick is rebuilt from exactly those messages
and held ticks are held: a replay of a `sync` node's recording is then exact, although the
recorder received the messages in its own order. An input the recorder dropped (sensor topics
are best effort) is replaced by the newest older one and counted (`inputs_substituted`); from
that tick on the episode's state (chunk, smoother, noise counter) may differ, so the report also
compares the commands before it on their own (`exact_commands`, `exact_passed`).
Without those messages, inputs are taken in the bag's receive order. Recordings of an `async`
node differ where a chunk arrived late.
`localize` runs two artifacts side by side on the same ticks and names the first node, in
topological order, whose output differs.
"""

import json

import numpy as np

from lamp_ros.node.engine import ControlEngine
from lamp_ros.observation import DEFAULT_PROMPT
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagError, read_bag


def bag_layout(messages, slots=None) -> dict:
    """slot -> (topic, compressed), the command topic and type; errors name what is missing.
    `slots`: the artifact's camera slots; None: every camera topic the bag holds."""
    present = {m.topic: m.msgtype for m in messages}
    if slots is None:
        slots = sorted({s for s in map(topics.camera_slot, present) if s is not None})
    cameras, missing = {}, []
    for slot, topic in ((s, topics.camera_topic(s)) for s in slots):
        if topic in present:
            cameras[slot] = (topic, False)
        elif f'{topic}/compressed' in present:
            cameras[slot] = (f'{topic}/compressed', True)
        else:
            missing.append(topic)
    if missing:
        raise BagError(f'bag has no camera topic {missing} (raw or /compressed); topics: '
                       f'{sorted(present)}')
    if topics.JOINTS_TOPIC not in present:
        raise BagError(f'bag has no {topics.JOINTS_TOPIC}; topics: {sorted(present)}')
    commands = [t for t in topics.COMMAND_TOPICS if t in present]
    return {'cameras': cameras, 'command': commands[0] if commands else None,
            'command_type': present.get(commands[0]) if commands else None}


def _feed(engines, message, layout, now: float) -> None:
    by_topic = {topic: (slot, compressed) for slot, (topic, compressed)
                in layout['cameras'].items()}
    if message.topic in by_topic:
        slot, compressed = by_topic[message.topic]
        msg = message.decode()
        for engine in engines:
            engine.on_image(slot, msg, now, compressed)
    elif message.topic == topics.JOINTS_TOPIC:
        msg = message.decode()
        for engine in engines:
            engine.on_joints(msg, now)


def _engine(runtime, layout, prompt, max_age, max_skew):
    return ControlEngine(runtime, list(layout['cameras']), runtime.joint_names, prompt,
                         max_age, max_skew)


def ticks(messages, layout):
    """Recorded command messages: the tick times of the replay."""
    return [m for m in messages if m.topic == layout['command']]


def compare_commands(produced, expected, atol: float, rtol: float, times) -> dict:
    """Per-joint comparison of two command sequences (None = no command at that tick)."""
    errors, first, within, total = [], None, 0, 0
    for i, (got, want) in enumerate(zip(produced, expected)):
        if want is None:
            continue
        want = np.asarray(want, np.float64)
        got = np.full_like(want, np.nan) if got is None else np.asarray(got, np.float64)
        err = np.abs(got - want)
        ok = err <= atol + rtol * np.abs(want)  # NaN (no command produced) is never ok
        within += int(ok.sum())
        total += ok.size
        errors.append(np.nanmax(err) if np.isfinite(err).any() else np.inf)
        if first is None and not ok.all():
            j = int(np.argmin(ok))
            first = {'index': i, 't': times[i], 'joint': j, 'expected': float(want[j]),
                     'got': float(got[j]), 'abs_error': float(err[j])}
    max_err = float(max(errors)) if errors else 0.0
    return {'passed': first is None and total > 0,
            'max_abs_error': max_err if np.isfinite(max_err) else None,
            'within_tolerance_pct': 100.0 * within / total if total else 0.0,
            'messages': len(errors), 'first_failure': first}


LATENCY_TOPIC = '/vla_policy/command_latency'


def observation_stamps(messages, layout, n_ticks: int):
    """Per recorded command: {'fresh': bool, 'joints': stamp, slot: stamp} from the node's
    latency messages (same order as the commands), or None when the bag cannot tell."""
    rows = [m.decode() for m in messages if m.topic == LATENCY_TOPIC]
    if not rows or len(rows) not in (n_ticks, n_ticks - 1):
        return None  # (the recording may stop between a command and its latency message)
    label = rows[0].layout.dim[0].label.split(',') if len(rows[0].layout.dim) else []
    if 'fresh' not in label or 'stamp.joints' not in label:
        return None  # an older node: receive order it is
    out = []
    for row in rows:
        values = dict(zip(label, row.data))
        stamps = {k.removeprefix('stamp.'): v for k, v in values.items()
                  if k.startswith('stamp.')}
        out.append({'fresh': values['fresh'] == 1.0, 'tick': values.get('tick_s'),
                    'episode_start': values.get('episode_start_s'),
                    'index': values.get('command_index'), **stamps})
    if len(out) < n_ticks:
        out.append({'fresh': False, 'tick': None, 'unknown': True})
    return out


def _by_stamp(messages, layout) -> dict:
    """(slot or 'joints', header stamp in ns) -> the bag message."""
    slot_of = {topic: slot for slot, (topic, _) in layout['cameras'].items()}
    slot_of[topics.JOINTS_TOPIC] = 'joints'
    index = {}
    for m in messages:
        if m.topic in slot_of:
            stamp = m.decode().header.stamp
            index[(slot_of[m.topic], stamp.sec * 10**9 + stamp.nanosec)] = m
    return index


def _feed_stamped(engine, index, stamps, layout, now: float) -> int:
    """Give the engine the inputs the node used, found by header stamp; returns how many had
    to be substituted by the newest older message of the same input (the recorder can drop
    best-effort sensor messages the node received). Exact when it returns 0."""
    substituted = 0
    for key, stamp in stamps.items():
        if key in ('fresh', 'tick', 'episode_start', 'index', 'unknown') or stamp != stamp:
            continue
        want = stamp * 1e9
        candidates = [(s, m) for (k, s), m in index.items() if k == key and s <= want + 2e3]
        if not candidates:
            substituted += 1
            continue
        found, message = max(candidates, key=lambda c: c[0])
        substituted += abs(found - want) > 2e3  # float64 seconds lose a few ns
        if key == 'joints':
            engine.on_joints(message.decode(), now)
        else:
            engine.on_image(key, message.decode(), now, layout['cameras'][key][1])
    return substituted


def replay(bag: str, artifact: str, prompt: str = DEFAULT_PROMPT, atol: float = 1e-5,
           rtol: float = 1e-4, max_age: float = 0.5, max_skew: float = 0.25,
           golden: str | None = None) -> dict:
    """Deterministic replay of `bag` through `artifact`; see the module docstring."""
    from lamp_ros.runtime import Runtime
    messages = read_bag(bag)
    runtime = Runtime.load(artifact, execution='sync')
    layout = bag_layout(messages, runtime.camera_slots)
    if golden:
        with open(golden, encoding='utf-8') as f:
            expected = json.load(f)['commands']
    elif layout['command'] is None:
        raise BagError(f'{bag}: no recorded commands on {list(topics.COMMAND_TOPICS)} and no '
                       'golden file to compare with')
    engine = _engine(runtime, layout, prompt, max_age, max_skew)
    tick_msgs = ticks(messages, layout)
    if not tick_msgs:
        raise BagError(f'{bag}: no command messages to replay against')
    stamped = observation_stamps(messages, layout, len(tick_msgs))
    first = stamped[0].get('tick') if stamped else None
    first = tick_msgs[0].t_ns * 1e-9 if first is None or first != first else first
    episode_start = stamped[0].get('episode_start') if stamped else None
    if episode_start is None or episode_start != episode_start:
        episode_start = first - 1.0 / runtime.rate_hz  # the node ticks one period after start
    # A recorder that subscribed after the node's first commands cannot replay the episode's
    # state (chunk, smoother, noise counter) exactly: said in the report, not hidden.
    mid_episode = bool(stamped and (stamped[0].get('index') or 0) > 0)
    engine.start(episode_start)
    index = _by_stamp(messages, layout) if stamped else None
    produced, times, recorded, substituted = [], [], [], 0
    exact = None  # commands replayed before the first substituted input
    for message in messages:
        now = message.t_ns * 1e-9
        if message.topic == layout['command']:
            if stamped:
                used = stamped[len(produced)]
                tick_now = used['tick'] if used.get('tick') == used.get('tick') else now
                if used['fresh']:
                    substituted += _feed_stamped(engine, index, used, layout, tick_now)
                    if substituted and exact is None:
                        exact = len(produced)
                    result = engine.tick(tick_now)
                else:
                    result = engine.fault('held', 'held in the recording')
            else:
                result = engine.tick(now)
            produced.append(None if result.command is None else result.command.tolist())
            times.append(now - tick_msgs[0].t_ns * 1e-9)
            if not golden:
                unknown = stamped and stamped[len(produced) - 1].get('unknown')
                recorded.append(None if unknown else topics.command_positions(
                    message.decode(), layout['command_type']))
        elif not stamped:
            _feed([engine], message, layout, now)
    wanted = expected if golden else recorded
    report = compare_commands(produced, wanted, atol, rtol, times)
    exact = len(produced) if exact is None else exact
    prefix = compare_commands(produced[:exact], wanted[:exact], atol, rtol, times)
    report.update(exact_commands=prefix['messages'], exact_passed=prefix['passed'],
                  mode='deterministic', atol=atol, rtol=rtol, bag=bag,
                  inputs='by recorded stamps' if stamped else 'by receive order',
                  inputs_substituted=substituted, starts_mid_episode=mid_episode,
                  artifact_id=runtime.id, produced=produced)
    return report


def localize(bag: str, artifact: str, against: str, prompt: str = DEFAULT_PROMPT,
             atol: float = 1e-5, rtol: float = 1e-4, max_age: float = 0.5,
             max_skew: float = 0.25) -> dict:
    """Run two artifacts on the same bag; name the first node whose output differs."""
    from lamp_ros.artifact.compare import compare
    from lamp_ros.runtime import Runtime
    messages = read_bag(bag)
    runtimes = [Runtime.load(a, execution='sync') for a in (artifact, against)]
    layout = bag_layout(messages, runtimes[0].camera_slots)
    tick_msgs = ticks(messages, layout)
    if not tick_msgs:
        raise BagError(f'{bag}: no command messages to replay against')
    engines = [_engine(rt, layout, prompt, max_age, max_skew) for rt in runtimes]
    start = tick_msgs[0].t_ns * 1e-9 - 1.0 / runtimes[0].rate_hz
    for engine in engines:
        engine.start(start)
    order = [(n.id, v) for n in runtimes[0].artifact.graph.nodes for v in n.outputs]
    compared, tick = 0, -1
    for message in messages:
        now = message.t_ns * 1e-9
        if message.topic != layout['command']:
            _feed(engines, message, layout, now)
            continue
        tick += 1
        captures = []
        for rt, engine in zip(runtimes, engines):
            rt.capture_into = {}
            engine.tick(now)
            captures.append(rt.capture_into)
            rt.capture_into = None
        for node_id, value in order:
            a, b = captures[0].get(value), captures[1].get(value)
            if a is None or b is None:
                continue
            compared += 1
            result = compare(a, b, atol, rtol)
            if not result['passed']:
                return {'diverged': True, 'node': node_id, 'value': value, 'tick': tick,
                        't': now - tick_msgs[0].t_ns * 1e-9, **result,
                        'artifact': runtimes[0].id, 'against': runtimes[1].id,
                        'values_compared': compared}
    return {'diverged': False, 'node': None, 'values_compared': compared, 'ticks': tick + 1,
            'artifact': runtimes[0].id, 'against': runtimes[1].id}
