"""The state store: every stateful operator's episode state, in one place that reset() clears.

Operators are pure (`run(state, ...) -> (outputs, new_state)`); the store holds the current
state per node and the function that makes a fresh one, so a node activation (new episode)
is one call and nothing else in the runtime carries memory between ticks.
"""


class StateStore:
    """With an arena, state arrays live in their planned views (`<node>.state.<key>`) and
    new state is copied in place; without one, the arrays are simply kept."""

    def __init__(self, arena=None):
        self._init = {}
        self._state = {}
        self._arena = arena

    def _place(self, node_id: str, state: dict) -> dict:
        if self._arena is None:
            return state
        return {k: self._arena.put(f'{node_id}.state.{k}', v) for k, v in state.items()}

    def register(self, node_id: str, init_state) -> None:
        if node_id in self._init:
            raise ValueError(f'state: node {node_id!r} registered twice')
        self._init[node_id] = init_state
        self._state[node_id] = self._place(node_id, init_state())

    def get(self, node_id: str) -> dict:
        return self._state[node_id]

    def set(self, node_id: str, state: dict) -> None:
        if node_id not in self._init:
            raise KeyError(f'state: node {node_id!r} is not stateful')
        self._state[node_id] = self._place(node_id, state)

    def reset(self) -> None:
        """Start a new episode: every stateful node back to its initial state."""
        self._state = {k: self._place(k, init()) for k, init in self._init.items()}

    def snapshot(self) -> dict:
        """node id -> {key: array} (copies), for inspection and tests."""
        return {k: {n: a.copy() for n, a in v.items()} for k, v in self._state.items()}

    def __contains__(self, node_id: str) -> bool:
        return node_id in self._init
