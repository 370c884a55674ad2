"""Fixtures of the backend tests: the real program of pi05_tiny_cuda's cuda group, on the CPU."""

import pytest
import torch

from lamp_ros.backends import text_lengths
from lamp_ros.backends.cuda.program_load import load_program
from lamp_ros.backends.group_module import group_module
from lamp_ros.compiler.partition import assign, partition
from lamp_ros.compiler.rewrites import run_passes
from lamp_ros.policies.pi05.rewrites import REWRITES
from lamp_ros.compiler.record_passes import stage_modules
from lamp_ros.spec import load_spec
from lamp_ros.policies.pi05.cuda.lowering import use_kernels
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline


@pytest.fixture(scope='session')
def cuda_group():
    """(spec, graph, group, the group's module on the lamp kernels' CPU code, its inputs as the
    example observation makes them)."""
    spec = load_spec('config/specs/pi05_tiny_cuda.yaml')
    pipeline = build_pipeline(spec)
    values = {}
    graph = trace_pipeline(pipeline, pipeline.policy.example_observation(),
                           export=False, values_out=values)
    (group,) = [g for g in partition(graph, spec, assign(graph, spec)) if g.backend == 'cuda']
    assert group.nodes == ('vision', 'prefix', 'denoise') and group.side_stages == ('denoise',)
    modules, _ = run_passes(REWRITES, stage_modules(graph, pipeline.policy), spec.passes)
    use_kernels(modules)
    module = group_module(graph, group, modules)
    args = tuple(torch.as_tensor(values[name]) for name in group.inputs)
    return spec, graph, group, module, args, values


def _exported(module, args, path, dynamic_shapes=None):
    """Export, save to `path` and load back as the cuda runner loads it."""
    with torch.no_grad():
        exported = torch.export.export(module, args, strict=False, dynamic_shapes=dynamic_shapes)
    torch.export.save(exported, str(path))
    return load_program(str(path))


@pytest.fixture(scope='session')
def program_archive(cuda_group, tmp_path_factory):
    """(path of the cuda group's PT2 archive, the program loaded back from it)."""
    _, _, group, module, args, _ = cuda_group
    path = tmp_path_factory.mktemp('stage_streams') / 'program.pt2'
    return str(path), _exported(module, args, path)


@pytest.fixture(scope='session')
def program(cuda_group, program_archive):
    """(group, exported program of the cuda group loaded back from its archive, its inputs)."""
    _, _, group, _, args, _ = cuda_group
    return group, program_archive[1], args


@pytest.fixture(scope='session')
def text_program(cuda_group, tmp_path_factory):
    """(group, the program exported as the build exports it with the spec's prompt lengths,
    its TextAxis, its inputs), loaded back from its archive."""
    spec, graph, group, module, args, values = cuda_group
    axis = text_lengths.text_axis(graph, group, values, spec.fusion['text_lengths'])
    path = tmp_path_factory.mktemp('text_lengths') / 'program.pt2'
    exported = _exported(module, args, path, text_lengths.dynamic_shapes(axis, group.inputs))
    return group, exported, axis, args
