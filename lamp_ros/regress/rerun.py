"""The recorded ticks run again through an artifact: the loop under `lamp replay`.

From the chosen start (start.py) every tick gets the inputs the node used (by header stamp) or,
without the node's records, those received before it; an asynchronous run's inferences follow
the recorded schedule (schedule.py); at every episode state the node published the replay's
own is checked against it (state_check.py). The result is the produced and the recorded
commands side by side, with what the verdict may rest on (`judged`) and why not.
"""

import numpy as np

from lamp_ros.node.engine import ControlEngine
from lamp_ros.regress.recording import stamp_index
from lamp_ros.regress.start import choose_start
from lamp_ros.regress.state_check import StateCheck
from lamp_ros.runtime import episode_state


def feed_stamped(engine, index, stamps: dict, layout, now: float) -> int:
    """Give the engine the inputs a tick used, found by header stamp; returns how many had to
    be substituted by the newest older message of the same input (the recorder can lose
    best-effort sensor messages the node received). Exact when it returns 0."""
    substituted = 0
    for key, stamp in stamps.items():
        found = index.get((key, stamp))
        if found is None:
            older = [(s, m) for (k, s), m in index.items() if k == key and s <= stamp]
            substituted += 1
            if not older:
                continue
            found = max(older, key=lambda c: c[0])[1]
        if key == 'joints':
            engine.on_joints(found.decode(), now)
        else:
            engine.on_image(key, found.decode(), now, layout['cameras'][key][1])
    return substituted


def feed_received(engines, message, layout, now: float) -> None:
    """Receive order: a bag message to every engine, as the node would have received it."""
    by_topic = {topic: (slot, compressed) for slot, (topic, compressed)
                in layout['cameras'].items()}
    if message.topic in by_topic:
        slot, compressed = by_topic[message.topic]
        msg = message.decode()
        for engine in engines:
            engine.on_image(slot, msg, now, compressed)
    elif message.topic == layout['joints']:
        msg = message.decode()
        for engine in engines:
            engine.on_joints(msg, now)


def _delay_differs(delay, recorded) -> bool:
    if recorded is None or recorded != recorded:
        return delay is not None
    return delay is None or int(delay) != int(recorded)


class _Tally:
    """What the loop counts on its way."""

    def __init__(self):
        self.produced, self.recorded, self.times, self.judged = [], [], [], []
        self.substituted, self.exact, self.held_by_hold = 0, None, 0
        self.merge_mismatches = self.delay_mismatches = 0
        self.unscheduled = self.not_started = 0
        self.lost_from = None       # first command of the segment computed after a lost input
        self.not_judged_lost = 0

    def lost(self) -> None:
        if self.exact is None:
            self.exact = len(self.produced)
        if self.lost_from is None:
            self.lost_from = len(self.produced)

    def unjudge_lost(self) -> None:
        """The commands since the segment's first lost input leave the verdict."""
        if self.lost_from is not None:
            for i in range(self.lost_from, len(self.judged)):
                self.not_judged_lost += self.judged[i]
                self.judged[i] = False
        self.lost_from = None


def rerun(recording, runtime, schedule, settings) -> dict:
    """Tick the engine through `recording` (see the module docstring)."""
    layout = recording.layout
    engine = ControlEngine(runtime, list(layout['cameras']),
                           settings['joint_names'] or runtime.joint_names, settings['prompt'],
                           settings['max_age'], settings['max_skew'], settings['on_fault'])
    ticks = recording.ticks
    index = stamp_index(recording) if recording.stamped else None
    start = choose_start(recording, runtime)
    engine.start(start.episode_start)
    if start.state is not None:
        episode_state.restore(runtime, start.state.arrays)
        engine.last_safe = np.asarray(ticks[start.position].published, np.float64)
    begin = start.position + (start.state is not None)
    if schedule is not None and begin < len(ticks):
        schedule.skip_before(ticks[begin].time, count=False)
    checks = StateCheck(recording, runtime, start, schedule is not None)
    tally = _Tally()
    receive = iter(recording.messages) if not recording.stamped else None
    for tick in ticks[begin:]:
        result = _one_tick(tick, engine, runtime, schedule, index, receive, layout, tally)
        if tick.published is not None:
            tally.produced.append(None if result is None or result.command is None
                                  else result.command.tolist())
            tally.recorded.append(tick.published)
            # judged: a command the policy made, with its own record (a last command whose
            # latency row missed the bag's end has none)
            tally.judged.append(result is not None and
                                (tick.row is not None or not recording.stamped))
            tally.times.append(tick.time - ticks[0].time)
        outcome = checks.after_tick(tick, engine, tally.lost_from is not None)
        if outcome == 'resynced':
            tally.unjudge_lost()
        elif outcome is not None:
            tally.lost_from = None
    if checks.compared:  # the node's states were checked: the last segment's lost inputs too
        tally.unjudge_lost()
    return {
        'produced': tally.produced, 'recorded': tally.recorded, 'times': tally.times,
        'judged': tally.judged,
        'inputs': 'by recorded stamps' if recording.stamped else 'by receive order',
        'execution': 'async, on the recorded schedule' if schedule is not None else 'sync',
        'inputs_substituted': int(tally.substituted),
        'exact_commands': len(tally.produced) if tally.exact is None else tally.exact,
        'commands_from_lost_inputs': int(tally.not_judged_lost),
        'starts_mid_episode': bool(start.mid_episode), 'start': start.describe(),
        'commands_before_start': sum(1 for t in ticks[:begin] if t.published is not None),
        'commands_held_by_hold': int(tally.held_by_hold),
        'recorded_artifact_id': (recording.session or {}).get('artifact_id'),
        'state_checks': checks.summary(),
        'schedule': None if schedule is None else {
            'unscheduled_inferences': tally.unscheduled,
            'recorded_inferences_not_started': tally.not_started,
            'failed_as_recorded': schedule.failed_as_recorded,
            'merge_mismatches': tally.merge_mismatches,
            'delay_mismatches': tally.delay_mismatches},
    }


def _one_tick(tick, engine, runtime, schedule, index, receive, layout, tally):
    """Run one recorded tick; its TickResult, or None for a command of `~/hold`."""
    row = tick.row or {}
    episode = row.get('episode_start_s', (tick.started or {}).get('episode_start_s'))
    if episode is not None and episode != engine.t0:
        engine.start(episode)  # ~/resume (or a re-activation): a new episode
    before = (schedule.unscheduled, schedule.not_started) if schedule is not None else None
    if schedule is not None:
        schedule.now = tick.time
        schedule.skip_before(tick.time)
    if receive is not None:  # no records: the inputs received before this command
        for message in receive:
            if message is tick.command:
                break
            feed_received([engine], message, layout, message.t_ns * 1e-9)
    if row.get('held') == 1.0:  # ~/hold: the node published the joints, no policy
        tally.held_by_hold += 1
        return None
    if tick.row is not None and not tick.stamps:
        return engine.fault('held', 'held in the recording')
    if index is not None:
        missed = feed_stamped(engine, index, tick.stamps, layout, tick.time)
        tally.substituted += missed
        if missed:
            tally.lost()
    result = engine.tick(tick.time)
    if tally.lost_from is not None:
        return result  # an input was lost since the last resync: the schedule may differ
    if schedule is not None:
        tally.unscheduled += schedule.unscheduled - before[0]
        tally.not_started += schedule.not_started - before[1]
    if tick.merged and (result.inference is None or
                        result.inference.index != tick.merged['index']):
        tally.merge_mismatches += 1
    if tick.started and runtime.rtc and runtime.last_inferred and \
            _delay_differs(runtime.last_delay, tick.started['rtc_delay']):
        tally.delay_mismatches += 1
    return result
