"""backends/cuda/program_load.py: the cuda runner's torch.export.load with the schema's type hints
cached for the load gives the program torch.export.load gives, asking typing far less."""

import typing

import torch

from lamp_ros.backends.cuda.program_load import load_program


def _count_hints(monkeypatch) -> list:
    calls, real = [], typing.get_type_hints

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(typing, 'get_type_hints', counted)
    return calls


def test_the_cached_load_gives_the_same_program_with_fewer_questions(
        program_archive, monkeypatch):
    from torch._export.serde import serialize
    path, _ = program_archive
    calls = _count_hints(monkeypatch)
    plain = torch.export.load(path)
    asked_plain = len(calls)
    calls.clear()
    cached = load_program(path)
    assert serialize.typing is typing  # the stand-in is gone after the load
    assert asked_plain > 100 and len(calls) * 10 < asked_plain, (asked_plain, len(calls))
    assert cached.graph_module.code == plain.graph_module.code
    assert cached.graph_signature == plain.graph_signature
    assert cached.state_dict.keys() == plain.state_dict.keys()
    assert all(torch.equal(cached.state_dict[k], plain.state_dict[k]) for k in plain.state_dict)
    assert cached.constants.keys() == plain.constants.keys()


def test_a_deserialiser_reading_typing_otherwise_loads_plainly(program_archive, monkeypatch):
    """Where the deserialiser's `typing` name is not the typing module (as another torch
    version might have it), load_program leaves it alone and loads as torch does."""
    import types

    from torch._export.serde import serialize
    path, program = program_archive
    other = types.SimpleNamespace(**{k: getattr(typing, k) for k in dir(typing)
                                     if not k.startswith('__')})
    monkeypatch.setattr(serialize, 'typing', other)
    loaded = load_program(path)
    assert serialize.typing is other
    assert loaded.graph_module.code == program.graph_module.code
