"""The state store: every stateful operator's episode state, in one place that reset() clears.

Operators are pure (`run(state, ...) -> (outputs, new_state)`); the store holds the current
state per node and the function that makes a fresh one, so a node activation (new episode)
is one call and nothing else in the runtime carries memory between ticks.
"""


class StateStore:
    def __init__(self):
        self._init = {}
        self._state = {}

    def register(self, node_id: str, init_state) -> None:
        if node_id in self._init:
            raise ValueError(f'state: node {node_id!r} registered twice')
        self._init[node_id] = init_state
        self._state[node_id] = init_state()

    def get(self, node_id: str) -> dict:
        return self._state[node_id]

    def set(self, node_id: str, state: dict) -> None:
        if node_id not in self._init:
            raise KeyError(f'state: node {node_id!r} is not stateful')
        self._state[node_id] = state

    def reset(self) -> None:
        """Start a new episode: every stateful node back to its initial state."""
        self._state = {k: init() for k, init in self._init.items()}

    def snapshot(self) -> dict:
        """node id -> {key: array} (copies), for inspection and tests."""
        return {k: {n: a.copy() for n, a in v.items()} for k, v in self._state.items()}

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._init
