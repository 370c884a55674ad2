"""Where a replay can begin: at an episode start the bag holds, or at a state the node published.

An episode's commands depend on everything since it began (the plan, the filters, the noise
counter). A replay is exact only from a point whose state it knows: the start of an episode
(the tick that started its first inference is in the bag), or a tick after which the node
published the episode's state (runtime/episode_state.py). The earliest such point is chosen; a
bag with neither (a mid-episode recording of a node that published no state, or whose state
does not fit this artifact) starts from an empty plan at its first tick, and says so.
"""

from dataclasses import dataclass

from lamp_ros.runtime import episode_state


@dataclass(frozen=True)
class Start:
    position: int              # index of the first tick in recording.ticks
    episode_start: float       # the episode's start time (the node's clock)
    state: object              # the StateSnapshot restored after `position`, or None
    mid_episode: bool          # the bag's first tick belongs to an episode it does not start
    kind: str                  # 'episode start', 'episode state', 'receive order', 'unknown'
    tick_s: float

    def describe(self) -> dict:
        out = {'kind': self.kind, 'tick': self.position, 'tick_s': self.tick_s}
        if self.state is not None:
            out['state_of_artifact'] = self.state.artifact_id
        return out


def _episode_of(tick):
    row = tick.row or tick.started or {}
    return row.get('episode_start_s')


def _candidates(recording, runtime) -> list:
    ticks = recording.ticks
    out = []
    if recording.asynchronous:  # inference rows: inference 0 of an episode starts it
        out += [Start(p, t.started['episode_start_s'], None, False, 'episode start', t.time)
                for p, t in enumerate(ticks) if t.started and t.started['index'] == 0]
    elif ticks and (ticks[0].row or {}).get('command_index') == 0:
        out.append(Start(0, ticks[0].row['episode_start_s'], None, False, 'episode start',
                         ticks[0].time))
    at = {t.time: p for p, t in enumerate(ticks)}
    for snapshot in recording.states:
        p = at.get(snapshot.tick)
        if p is None or ticks[p].published is None:
            continue
        try:
            episode_state.check(runtime, snapshot.arrays)
        except ValueError:
            continue  # another artifact's operators: its state does not apply here
        out.append(Start(p, snapshot.episode_start, snapshot, True, 'episode state',
                         snapshot.tick))
    return sorted(out, key=lambda s: (s.position, s.state is not None))


def choose_start(recording, runtime) -> Start:
    """The Start of the replay (see the module docstring)."""
    ticks = recording.ticks
    if not recording.stamped:  # the node ticks one period after its episode starts
        return Start(0, ticks[0].time - runtime.period, None, False, 'receive order',
                     ticks[0].time)
    candidates = _candidates(recording, runtime)
    first_episode = _episode_of(ticks[0])
    mid = not any(c.state is None and c.episode_start == first_episode for c in candidates)
    if not candidates:
        return Start(0, first_episode if first_episode is not None else ticks[0].time, None,
                     mid, 'unknown', ticks[0].time)
    first = candidates[0]
    return Start(first.position, first.episode_start, first.state, mid, first.kind,
                 first.tick_s)
