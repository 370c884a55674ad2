"""The cuda program's weights once in the artifact (backends/cuda/program_weights.py), on the CPU:
a real torch.export program of two stages saved with its canonical tensors stripped, loaded,
and bound from real safetensors files."""

import os
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from lamp_ros.backends.cuda import program_weights
from lamp_ros.backends.cuda.program_load import load_program


class _Stage(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.register_buffer('shift', torch.randn(width))

    def forward(self, x):
        return torch.relu(self.linear(x)) + self.shift


class _Group(torch.nn.Module):
    """As group_module names them: stages.<node>.<name>."""

    def __init__(self, stages):
        super().__init__()
        self.stages = torch.nn.ModuleDict(stages)

    def forward(self, x):
        return self.stages['second'](self.stages['first'](x))


@pytest.fixture
def built(tmp_path):
    """(canonical modules, program path, stripped record, example input, expected output,
    folder of the nodes' safetensors): 'second.linear.weight' is changed after the canonical
    copy was taken, as a lowering that transposes or quantises a weight does."""
    torch.manual_seed(0)
    canonical = {'first': _Stage(64), 'second': _Stage(64)}
    lowered = {n: _Stage(64) for n in canonical}
    for n in canonical:
        lowered[n].load_state_dict(canonical[n].state_dict())
    with torch.no_grad():
        lowered['second'].linear.weight.mul_(2)
    group = _Group(lowered).eval()
    x = torch.randn(3, 64)
    want = group(x)
    program = torch.export.export(group, (x,))
    torch.export.save(program, str(tmp_path / 'full.pt2'))
    stripped = program_weights.strip(program, {n: m.state_dict() for n, m in canonical.items()})
    torch.export.save(program, str(tmp_path / 'program.pt2'))
    os.makedirs(tmp_path / 'weights')
    for n, m in canonical.items():
        save_file({k: v.contiguous() for k, v in m.state_dict().items()},
                  str(tmp_path / 'weights' / f'{n}.safetensors'))
    return canonical, tmp_path, stripped, x, want


def _weight_bytes(path) -> int:
    with zipfile.ZipFile(path) as archive:
        return sum(i.file_size for i in archive.infolist()
                   if '/data/weights/weight_' in i.filename)


def test_equal_tensors_leave_the_archive_and_changed_ones_stay(built):
    _, root, stripped, _, _ = built
    assert stripped == {'first': ['linear.bias', 'linear.weight', 'shift'],
                        'second': ['linear.bias', 'shift']}
    # the archive keeps the changed weight alone: 64 x 64 float32
    assert _weight_bytes(root / 'full.pt2') == 2 * (64 * 64 + 64 + 64) * 4
    assert _weight_bytes(root / 'program.pt2') == 64 * 64 * 4


def test_the_bound_program_computes_what_the_exported_one_did(built):
    _, root, stripped, x, want = built
    module = load_program(str(root / 'program.pt2')).module()
    assert program_weights.bind(module, stripped, str(root / 'weights'), 'cpu') == 5
    torch.testing.assert_close(module(x), want, rtol=0, atol=0)


def test_an_unbound_program_refuses_to_run(built):
    """The archive alone is not the model, and cannot pass for it: its placeholders are meta
    tensors, which torch will not compute with."""
    _, root, _, x, _ = built
    module = load_program(str(root / 'program.pt2')).module()
    assert module.stages.first.linear.weight.is_meta
    assert not module.stages.second.linear.weight.is_meta  # the changed one is in the archive
    with pytest.raises(RuntimeError, match='meta'):
        module(x)


def test_a_missing_or_reshaped_canonical_tensor_is_refused_with_its_name(built, tmp_path):
    canonical, root, stripped, _, _ = built
    module = load_program(str(root / 'program.pt2')).module()
    edited = tmp_path / 'edited'
    os.makedirs(edited)

    def write_first(tensors):
        save_file(tensors, str(edited / 'first.safetensors'))

    tensors = {k: v.contiguous() for k, v in canonical['first'].state_dict().items()}
    write_first({k: v for k, v in tensors.items() if k != 'shift'})
    with pytest.raises(program_weights.WeightsError,
                       match=r"weights/first.safetensors: no tensor 'shift'"):
        program_weights.bind(module, stripped, str(edited), 'cpu')
    write_first({**tensors, 'linear.weight': tensors['linear.weight'][:32].contiguous()})
    with pytest.raises(program_weights.WeightsError, match=r'linear.weight has shape \(32, 64\)'):
        program_weights.bind(module, stripped, str(edited), 'cpu')
    with pytest.raises(program_weights.WeightsError, match='stages.first.nothing'):
        program_weights.bind(module, {'first': ['nothing']}, str(root / 'weights'), 'cpu')


def test_a_placeholder_the_plan_does_not_list_is_refused(built):
    _, root, stripped, _, _ = built
    module = load_program(str(root / 'program.pt2')).module()
    partial = {**stripped, 'first': [n for n in stripped['first'] if n != 'shift']}
    with pytest.raises(program_weights.WeightsError,
                       match='1 program tensors have no values .* first stages.first.shift'):
        program_weights.bind(module, partial, str(root / 'weights'), 'cpu')
