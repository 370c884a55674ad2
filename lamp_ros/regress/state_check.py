"""The replay's episode state against the one the node published, at every chunk it merged.

Commands say what the node sent; the episode state after each merged chunk (runtime/
episode_state.py) says what it had built up: the plan, the filters, the noise counter, the
latency samples. When the replay runs the artifact the node ran, the two must be equal at every
such tick, which checks the whole episode and not only its commands.

A difference after an input the recorder lost is explained: the replay substituted an older
frame. The node's state is then taken over (resync) and the commands computed since the lost
input are left out of the verdict, so one lost frame costs one chunk's commands, not the rest of
the recording. A difference with no lost input is a mismatch and fails the replay (the replay
still resyncs, so what follows is judged on its own). Another artifact is not held to the
node's states: its own run is what a regression compares.
"""

import numpy as np

from lamp_ros.runtime import episode_state


class StateCheck:
    def __init__(self, recording, runtime, start, asynchronous: bool):
        same = runtime.id == (recording.session or {}).get('artifact_id')
        self._at = {s.tick: s for s in recording.states
                    if same and s.artifact_id == runtime.id and s.tick > start.tick_s}
        # sync execution measures its own inference times: only the schedule's are recorded
        self._skip = () if asynchronous else ('latency/samples', 'latency/seen')
        self.compared = self.equal = self.resynced = self.mismatched = 0
        self.first_mismatch = None

    def after_tick(self, tick, engine, lost_inputs: bool) -> str | None:
        """After `tick` ran: None when the node published no state there, else 'equal',
        'resynced' (it differed after a lost input) or 'mismatch'; the runtime then holds
        the node's state."""
        snapshot = self._at.get(tick.time)
        if snapshot is None:
            return None
        self.compared += 1
        mine = episode_state.capture(engine.runtime)
        differ = [name for name, value in snapshot.arrays.items() if name not in self._skip
                  and not np.array_equal(mine.get(name), value)]
        if not differ:
            self.equal += 1
            return 'equal'
        episode_state.restore(engine.runtime, snapshot.arrays)
        if tick.published is not None:
            engine.last_safe = np.asarray(tick.published, np.float64)
        if lost_inputs:
            self.resynced += 1
            return 'resynced'
        self.mismatched += 1
        if self.first_mismatch is None:
            self.first_mismatch = {'tick_s': tick.time, 'arrays': differ[:8]}
        return 'mismatch'

    def summary(self) -> dict:
        return {'compared': self.compared, 'equal': self.equal,
                'resynced_after_lost_inputs': self.resynced, 'mismatched': self.mismatched,
                'first_mismatch': self.first_mismatch}
