"""torch.export.load, with the PT2 schema's type hints resolved once per class.

torch's deserialiser (`torch._export.serde.serialize._dict_to_dataclass`) asks
`typing.get_type_hints` for a schema dataclass's field types at every node, argument and tensor
meta it reads; for pi05_full's cuda program that is over a hundred thousand calls and a large
share of the load's time (the profile is in docs/notebook/), every time a robot node configures
and once in every build. The schema's classes do not change while a program loads, so the
answers are kept for the length of one load, through a stand-in for the deserialiser module's
`typing` name that caches `get_type_hints` and hands everything else to the real module. The
cached load gives the same program, faster (test/backends/cuda/test_program_load.py checks the
sameness). Where torch's deserialiser does not read `typing` by that name (another torch
version), the plain load runs.
"""

import threading
import typing

_LOCK = threading.Lock()  # one stand-in at a time: loads in two threads queue here


class _CachedHints:
    """The `typing` module, but `get_type_hints` answers each distinct question once."""

    def __init__(self):
        self.answers = {}

    def get_type_hints(self, obj, globalns=None, localns=None, include_extras=False):
        key = (obj, id(globalns), id(localns), include_extras)
        if key not in self.answers:
            self.answers[key] = typing.get_type_hints(obj, globalns=globalns, localns=localns,
                                                      include_extras=include_extras)
        return self.answers[key]

    def __getattr__(self, name):
        return getattr(typing, name)


def load_program(path: str):
    """torch.export.load(path), faster (see the module doc); -> ExportedProgram."""
    import torch
    from torch._export.serde import serialize
    if getattr(serialize, 'typing', None) is not typing:
        return torch.export.load(path)
    with _LOCK:
        serialize.typing = _CachedHints()
        try:
            return torch.export.load(path)
        finally:
            serialize.typing = typing
