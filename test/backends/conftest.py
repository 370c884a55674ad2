"""Fixtures of the backend tests: the real program of pi05_tiny_cuda's cuda group, on the CPU."""

import pytest
import torch

from lamp_ros.backends.group_module import group_module
from lamp_ros.compiler.partition import assign, partition
from lamp_ros.compiler.passes import run_passes
from lamp_ros.compiler.passes.record import stage_modules
from lamp_ros.compiler.spec import load_spec
from lamp_ros.kernels.lowering import use_kernels
from lamp_ros.policies.example import example_observation
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline


@pytest.fixture(scope='session')
def program(tmp_path_factory):
    """(group, exported program of the cuda group loaded back from its archive, its inputs)."""
    spec = load_spec('config/specs/pi05_tiny_cuda.yaml')
    pipeline = build_pipeline(spec)
    values = {}
    graph = trace_pipeline(pipeline, example_observation(pipeline.policy.norm_stats),
                           export=False, values_out=values)
    (group,) = [g for g in partition(graph, spec, assign(graph, spec)) if g.backend == 'cuda']
    assert group.nodes == ('vision', 'prefix', 'denoise') and group.side_stages == ('denoise',)
    modules, _ = run_passes(stage_modules(graph, pipeline.policy), spec.passes)
    use_kernels(modules)
    module = group_module(graph, group, modules)
    args = tuple(torch.as_tensor(values[name]) for name in group.inputs)
    with torch.no_grad():
        exported = torch.export.export(module, args, strict=False)
    path = tmp_path_factory.mktemp('stage_streams') / 'program.pt2'
    torch.export.save(exported, str(path))
    return group, torch.export.load(str(path)), args
