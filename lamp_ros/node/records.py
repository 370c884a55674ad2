"""What vla_node publishes about its own work, so that a recording of it replays exactly.

A bag of a robot's topics holds the inputs, but not which of them the node used, when an
asynchronous chunk arrived, or what an episode that began before the recording had built up.
The node says so itself, on small topics that `lamp record` takes by default:

- `~/session` (std_msgs/String, JSON, transient local: a recorder that starts later still gets
  it): the configuration the episode runs with: artifact id, execution, rate, prompt, the topic
  of every input, the joint names, the operator overrides.
- `~/command_latency` (Float64MultiArray): one row per published command, LATENCY_LAYOUT,
  `stamp.<slot>` per camera, then `command.<i>` per joint: its tick, whether it is fresh, held
  or by `~/hold`, whether it started an inference or merged a chunk, the header stamp of every
  input it used, and the command itself (so that a row needs no command message beside it).
- `~/inference` (Float64MultiArray): one row per inference, INFERENCE_LAYOUT then
  `stamp.<slot>`: the tick it started at and the inputs it read, the tick its chunk was merged
  at, its duration, its real-time chunking delay.
- `~/episode_state` (std_msgs/UInt8MultiArray): after every tick that merged a chunk, the
  episode's state (runtime/episode_state.py), so a recording that starts mid-episode continues
  from it.

Each row's layout travels in `layout.dim[0].label`, so a reader finds fields by name.
"""

import math

SESSION_SCHEMA = 'lamp.session/1'
LATENCY_LAYOUT = ('input_stamp_s', 'e2e_latency_s', 'compute_s', 'inferred', 'fresh',
                  'tick_s', 'episode_start_s', 'command_index', 'rtc_delay', 'held', 'merged',
                  'stamp.joints')  # then stamp.<slot> per camera, `cameras` order
INFERENCE_LAYOUT = ('index', 'submitted_tick_s', 'merged_tick_s', 'episode_start_s', 'seconds',
                    'rtc_delay', 'failed', 'stamp.joints')  # then stamp.<slot> per camera
NAN = float('nan')


def _label(layout, slots) -> str:
    return ','.join([*layout, *(f'stamp.{s}' for s in slots)])


def latency_row(result, now: float, episode_start: float, command_index: int, inferred: bool,
                delay, slots, command, e2e: float = NAN, held: bool = False) -> tuple:
    """(values, label) of one command's row. `result`: the engine's TickResult, or None for a
    command published by `~/hold`; `command`: the positions published. `merged`: the tick
    merged a chunk (its inference row may miss a recording that stops right after it)."""
    fresh = bool(result is not None and result.fresh)
    stamps = (result.stamps if result is not None else None) or {}
    merged = result is not None and result.inference is not None
    values = [result.stamp if fresh else NAN, e2e, result.compute_s if result else 0.0,
              float(inferred), float(fresh), now, episode_start, float(command_index),
              NAN if delay is None else float(delay), float(held), float(merged),
              stamps.get('joints', NAN)]
    values += [stamps.get(slot, NAN) for slot in slots]
    values += [float(v) for v in command]
    return values, _label(LATENCY_LAYOUT, slots) + ''.join(
        f',command.{i}' for i in range(len(command)))


def inference_row(record, episode_start: float, slots) -> tuple:
    """(values, label) of one inference's row (node/engine.py InferenceRecord)."""
    values = [float(record.index), record.submitted, record.merged, episode_start,
              record.seconds, NAN if record.delay is None else float(record.delay),
              float(bool(record.error)), record.stamps.get('joints', NAN)]
    values += [record.stamps.get(slot, NAN) for slot in slots]
    return values, _label(INFERENCE_LAYOUT, slots)


def parse_row(label: str, data) -> dict:
    """name -> value of one row; `stamps`: {'joints': s, slot: s} (NaN stamps left out)."""
    names = label.split(',') if label else []
    if len(names) != len(data):
        raise ValueError(f'row of {len(data)} values under a layout of {len(names)} names')
    row, stamps, command = {}, {}, []
    for name, value in zip(names, data):
        value = float(value)
        if name.startswith('stamp.'):
            if not math.isnan(value):
                stamps[name[len('stamp.'):]] = value
        elif name.startswith('command.'):
            command.append(value)
        else:
            row[name] = value
    row['stamps'] = stamps
    if command:
        row['command'] = command
    return row


def session(node_name: str, runtime, config, slots: dict, joint_names, topics: dict) -> dict:
    """The configuration an episode runs with, as plain data (the `~/session` message).
    `slots`: slot -> (topic, compressed); `topics`: what the node publishes, resolved."""
    return {
        'schema': SESSION_SCHEMA, 'node': node_name, 'artifact_id': runtime.id,
        'artifact': config.artifact, 'execution': config.execution,
        'rate_hz': runtime.rate_hz, 'prompt': config.prompt,
        'cameras': {slot: {'topic': topic, 'compressed': compressed}
                    for slot, (topic, compressed) in slots.items()},
        'joint_states_topic': config.joint_states_topic, 'joint_names': list(joint_names),
        'overrides': config.overrides(), 'max_obs_age_s': config.max_obs_age_s,
        'max_skew_s': config.max_skew_s, 'on_fault': config.on_fault,
        'output': config.output, 'topics': dict(topics),
    }
