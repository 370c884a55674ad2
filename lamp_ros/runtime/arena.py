"""Memory arenas: one preallocated byte buffer per arena of memory.json, typed views into it.

The runtime never allocates a planned value per tick: a host op's result is copied into its
view, a compiled group writes its outputs straight into theirs (ONNX Runtime IOBinding), and
episode state lives in views too. A result whose dtype or shape differs from the graph's type is
an error naming the value: the plan and the code disagree, and silently reallocating would hide
it.
"""

import numpy as np


class Arena:
    def __init__(self, memory: dict, values: dict):
        self.buffers = {}
        self.views = {}
        for arena in memory.get('arenas', []):
            if not arena['device'].startswith('cpu'):
                continue  # device arenas belong to the backends that run there
            buf = np.zeros(arena['arena_bytes'], np.uint8)
            self.buffers[arena['device']] = buf
            for b in arena['buffers']:
                t = values[b['name']]
                dtype = np.dtype(t.dtype)
                nbytes = int(np.prod(t.shape, dtype=np.int64)) * dtype.itemsize
                view = buf[b['offset']:b['offset'] + nbytes].view(dtype).reshape(t.shape)
                self.views[b['name']] = view

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buffers.values())

    def view(self, name: str):
        return self.views.get(name)

    def put(self, name: str, value):
        """Store `value` in its planned view and return the view (or the value if unplanned)."""
        view = self.views.get(name)
        if view is None or value is None or value is view:
            return value
        value = np.asarray(value)
        if value.shape != view.shape or value.dtype != view.dtype:
            raise ValueError(f'{name}: produced {value.dtype}{list(value.shape)}, the memory '
                             f'plan holds {view.dtype}{list(view.shape)}')
        np.copyto(view, value)
        return view
