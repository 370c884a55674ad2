"""A bag read as a run of the node: which inputs it holds, and the ticks the node ran.

A bag from `lamp record` holds, besides the robot's topics, what the node said about its own
work (node/records.py): the session (which topics, prompt, overrides), one latency row per
command (the tick and the header stamps of the inputs it used), one row per inference (the tick
it started and the one its chunk was merged at) and the episode's state after every merge.
`read_recording` turns those into a list of `Tick`s in time order: every tick that published a
command, and every tick that started an inference without publishing one (an episode's first).
A latency row holds the command it stands for, so rows and commands need no pairing (a
recorder that falls behind can lose one and not the other); rows of an older node without the
command are paired with the command messages in order.

A bag without these records (another recorder, an older node, the offline generator) gives one
tick per recorded command, whose inputs are taken in receive order.
"""

from dataclasses import dataclass, field
import json
import math

from lamp_ros.node.convert import stamp_seconds
from lamp_ros.node.records import parse_row
from lamp_ros.regress import topics
from lamp_ros.regress.bag import BagError, read_bag
from lamp_ros.runtime import episode_state


def bag_layout(messages, slots=None, session: dict | None = None) -> dict:
    """slot -> (topic, compressed), the joints topic, the command topic and type; errors name
    what is missing. The topics come from the node's session when the bag holds one, else the
    defaults. `slots`: the artifact's camera slots; None: every camera the bag holds."""
    present = {m.topic: m.msgtype for m in messages}
    named = {slot: (c['topic'], c['compressed'])
             for slot, c in (session or {}).get('cameras', {}).items()}
    if slots is None:
        slots = sorted(named) or sorted({s for s in map(topics.camera_slot, present)
                                         if s is not None})
    cameras, missing = {}, []
    for slot in slots:
        topic = named[slot][0] if slot in named else topics.camera_topic(slot)
        if topic in present:
            cameras[slot] = (topic, present[topic] == topics.COMPRESSED)
        elif f'{topic}/compressed' in present:
            cameras[slot] = (f'{topic}/compressed', True)
        else:
            missing.append(topic)
    if missing:
        raise BagError(f'bag has no camera topic {missing} (raw or /compressed); topics: '
                       f'{sorted(present)}')
    joints = (session or {}).get('joint_states_topic', topics.JOINTS_TOPIC)
    if joints not in present:
        raise BagError(f'bag has no {joints}; topics: {sorted(present)}')
    command = ((session or {}).get('topics') or {}).get('command')
    commands = [command] if command in present else \
        [t for t in topics.COMMAND_TOPICS if t in present]
    return {'cameras': cameras, 'joints': joints,
            'command': commands[0] if commands else None,
            'command_type': present.get(commands[0]) if commands else None}


@dataclass
class Tick:
    """One control tick of the recorded run."""

    time: float                    # the node's tick time (its clock), seconds
    command: object = None         # the recorded command message, when paired with one
    row: dict | None = None        # its latency row
    published: list | None = None  # the positions it published (None: it published none)
    started: dict | None = None    # the inference row of the inference this tick started
    merged: dict | None = None     # the inference row of the inference this tick merged
    stamps: dict = field(default_factory=dict)   # inputs the tick used (joints, slots)


@dataclass
class StateSnapshot:
    t_ns: int
    tick: float
    episode_start: float
    artifact_id: str
    arrays: dict


@dataclass
class Recording:
    bag: str
    messages: list
    layout: dict
    session: dict | None
    ticks: list                     # Tick, in time order
    stamped: bool                   # ticks rebuilt from the node's records (else receive order)
    asynchronous: bool              # inference rows say when each chunk was merged
    states: list                    # StateSnapshot, in time order


def _positions(message, layout):
    return topics.command_positions(message.decode(), layout['command_type'])


def _rows(messages, topic: str) -> list:
    out = []
    for m in messages:
        if m.topic == topic:
            msg = m.decode()
            label = msg.layout.dim[0].label if len(msg.layout.dim) else ''
            out.append((m, parse_row(label, msg.data)))
    return out


def session_of(messages) -> dict | None:
    """The node's session record in a bag (the last one), None when it holds none."""
    found = [m for m in messages if m.topic == topics.SESSION_TOPIC]
    if not found:
        return None
    try:
        return json.loads(found[-1].decode().data)
    except ValueError as exc:
        raise BagError(f'{topics.SESSION_TOPIC}: not a lamp session ({exc})') from exc


def _states(messages) -> list:
    out = []
    for m in messages:
        if m.topic == topics.EPISODE_STATE_TOPIC:
            arrays, meta = episode_state.from_bytes(m.decode().data)
            out.append(StateSnapshot(m.t_ns, float(meta['tick_s']),
                                     float(meta['episode_start_s']), meta['artifact_id'],
                                     arrays))
    return out


def read_recording(bag: str, slots=None) -> Recording:
    """The bag as a run of the node (see the module docstring); BagError naming what is
    missing or damaged."""
    messages = read_bag(bag)
    session = session_of(messages)
    layout = bag_layout(messages, slots, session)
    commands = [m for m in messages if m.topic == layout['command']]
    latency = [row for _, row in _rows(messages, topics.LATENCY_TOPIC)]
    stamped = bool(latency) and {'fresh', 'tick_s'} <= set(latency[0])
    # rows without their command are paired with the command messages: only where the counts
    # say none was lost (a recording may stop between a command and its row)
    if stamped and 'command' not in latency[0] and \
            len(latency) not in (len(commands), len(commands) - 1):
        stamped = False
    if not stamped:
        ticks = [Tick(m.t_ns * 1e-9, m, published=_positions(m, layout))
                 for m in commands]
        return Recording(bag, messages, layout, session, ticks, False, False, [])
    ticks = {}
    if 'command' in latency[0]:
        for row in latency:
            ticks[row['tick_s']] = Tick(row['tick_s'], row=row, published=row['command'],
                                        stamps=dict(row['stamps']))
    else:
        for i, message in enumerate(commands):
            row = latency[i] if i < len(latency) else None
            time_s = row['tick_s'] if row else message.t_ns * 1e-9
            ticks[time_s] = Tick(time_s, message, row,
                                 stamps=dict(row['stamps']) if row else {},
                                 published=_positions(message, layout))
    inferences = _rows(messages, topics.INFERENCE_TOPIC)
    for message, row in inferences:
        start = row['submitted_tick_s']
        if start == start:  # NaN: started before the node's records say (cannot happen)
            tick = ticks.setdefault(start, Tick(start))
            tick.started = row
            tick.stamps = tick.stamps or dict(row['stamps'])
        merged = ticks.get(row['merged_tick_s'])
        if merged is not None:
            merged.merged = row
    ordered = sorted(ticks.values(), key=lambda t: t.time)
    if inferences:
        _unreported_inferences(ordered)
    return Recording(bag, messages, layout, session, ordered, True, bool(inferences),
                     _states(messages))


def _unreported_inferences(ticks) -> None:
    """An inference whose row is not in the bag (its row comes when its chunk is merged: the
    recording stopped first) still started at a tick whose latency row says `inferred`; its
    chunk arrived at the next tick whose row says `merged`, if the bag holds one. Such ticks
    get a stand-in row; its duration, which the node measured and nothing in the bag holds,
    is taken as the time between the two ticks (it matters only to inferences after it, which
    a bag that stopped there does not hold)."""
    for i, tick in enumerate(ticks):
        row = tick.row or {}
        if tick.started is not None or row.get('inferred') != 1.0:
            continue
        merged = next((t for t in ticks[i + 1:] if (t.row or {}).get('merged') == 1.0
                       and t.merged is None), None)
        tick.started = {'index': math.nan, 'submitted_tick_s': tick.time,
                        'merged_tick_s': merged.time if merged else math.inf,
                        'episode_start_s': row.get('episode_start_s'),
                        'seconds': merged.time - tick.time if merged else 0.0,
                        'rtc_delay': row.get('rtc_delay', math.nan), 'failed': 0.0,
                        'stamps': dict(tick.stamps), 'unreported': True}


def stamp_index(recording: Recording) -> dict:
    """(slot or 'joints', header stamp in seconds) -> the bag message; the stamps are the
    floats the node computed (node/convert.py stamp_seconds), so lookups are exact."""
    slot_of = {topic: slot for slot, (topic, _) in recording.layout['cameras'].items()}
    slot_of[recording.layout['joints']] = 'joints'
    index = {}
    for m in recording.messages:
        if m.topic in slot_of:
            index[(slot_of[m.topic], stamp_seconds(m.decode().header.stamp))] = m
    return index
