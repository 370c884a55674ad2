"""Backend assignment, fallbacks, acyclic fusion, phases and coverage."""

from dataclasses import replace

import pytest

from lamp_ros.compiler.partition import assign, partition, phases
from lamp_ros.compiler.coverage import coverage
from lamp_ros.spec import load_spec, StageChoice
from lamp_ros.graph.graph import Graph, Node
from lamp_ros.graph.types import TensorType


def _groups(graph, spec):
    return partition(graph, spec, assign(graph, spec))


def test_default_plan_of_tiny(tiny_graph, tiny_spec):
    groups = _groups(tiny_graph, tiny_spec)
    assert [g.nodes for g in groups] == [
        ('normalize_state', 'discretize_state', 'tokenize'),
        ('preprocess_image.base', 'preprocess_image.left_wrist', 'preprocess_image.right_wrist',
         'stack_cameras'),
        ('sample_noise',),
        ('vision', 'prefix', 'denoise'),
        ('unnormalize_actions',),
        ('chunker', 'smoother', 'clamp'),
    ]
    model = groups[3]
    assert (model.backend, model.precision, model.device) == ('onnxruntime', 'fp32', 'cpu')
    assert model.inputs == ('stack_cameras.pixels', 'stack_cameras.image_mask',
                            'tokenize.token_ids', 'tokenize.token_mask', 'sample_noise.noise')
    assert model.outputs == ('denoise.actions',)  # the KV cache stays inside the group
    assert groups[5].inputs == ('unnormalize_actions.chunk', 't_obs', 't', 'state')
    assert all(g.reason for g in groups)


def test_phases_split_inference_from_ticks(tiny_graph):
    p = phases(tiny_graph)
    assert {n for n, ph in p.items() if ph == 'tick'} == {'chunker', 'smoother', 'clamp'}


def test_split_after_breaks_a_fusion(tiny_graph, tiny_spec, respec):
    spec = respec(tiny_spec, fusion={'fuse_adjacent': True, 'split_after': ['vision']})
    nodes = [g.nodes for g in _groups(tiny_graph, spec)]
    assert ('vision',) in nodes and ('prefix', 'denoise') in nodes


def test_no_fusion_gives_one_group_per_node(tiny_graph, tiny_spec, respec):
    spec = respec(tiny_spec, fusion={'fuse_adjacent': False, 'split_after': []})
    assert len(_groups(tiny_graph, spec)) == len(tiny_graph.nodes)


def test_fallback_is_recorded_with_its_reason(tiny_graph, tiny_spec, respec):
    stages = dict(tiny_spec.stages, tokenize=StageChoice('onnxruntime', fallback=('host',)))
    spec = respec(tiny_spec, stages=stages)
    assignments = assign(tiny_graph, spec)
    assert assignments['tokenize'].backend == 'host'
    assert assignments['tokenize'].fallback_from == 'onnxruntime'
    assert 'fallback: onnxruntime: ONNX Runtime runs model stages' in \
        assignments['tokenize'].reason
    table = coverage(tiny_graph, assignments)
    assert table['fallbacks'] == [{'node': 'tokenize', 'wanted': 'onnxruntime', 'got': 'host',
                                   'reason': assignments['tokenize'].reason}]


def test_impossible_choice_names_the_stage(tiny_graph, tiny_spec, respec):
    stages = dict(tiny_spec.stages, vision=StageChoice('host'))
    with pytest.raises(ValueError, match=r"stages.vision: no backend of \['host'\]"):
        assign(tiny_graph, respec(tiny_spec, stages=stages))


def test_coverage_counts_nodes_and_ops(tiny_graph, tiny_spec):
    table = coverage(tiny_graph, assign(tiny_graph, tiny_spec))
    assert table['backends']['host']['nodes'] == 12
    assert table['backends']['onnxruntime']['nodes'] == 3
    assert table['total_nodes'] == 15
    assert table['fallbacks'] == []


def test_fusion_never_makes_a_cycle(tiny_spec):
    # a -> m -> c and a -> c: fusing the host nodes a and c would make {a,c} -> m -> {a,c}.
    f32 = TensorType('float32', (2,))
    values = {'x': replace(f32, role='input'), 'a.y': f32, 'm.y': f32,
              'c.y': replace(f32, role='output')}
    graph = Graph(nodes=(
        Node('a', 'normalize_state', 'host', ('x',), ('a.y',), ports=('state',)),
        Node('m', 'vision', 'model', ('a.y',), ('m.y',), ports=('pixels',)),
        Node('c', 'discretize_state', 'host', ('a.y', 'm.y'), ('c.y',),
             ports=('norm_state', 'extra')),
    ), values=values, inputs=('x',), outputs=('c.y',)).lint()
    groups = _groups(graph, tiny_spec)
    assert [g.nodes for g in groups] == [('a',), ('m',), ('c',)]


def _with_side_stream(spec, respec, stages):
    return respec(spec, fusion={**spec.fusion, 'side_stream': list(stages)})


def test_side_stream_stages_are_marked_on_their_cuda_group(tiny_graph):
    groups = _groups(tiny_graph, load_spec('config/specs/pi05_tiny_cuda.yaml'))
    marked = {g.name: g.side_stages for g in groups if g.side_stages}
    (cuda,) = [g for g in groups if g.backend == 'cuda']
    assert marked == {cuda.name: ('denoise',)} and cuda.nodes == ('vision', 'prefix', 'denoise')
    assert cuda.to_dict()['side_stages'] == ['denoise']
    assert type(cuda).from_dict(cuda.to_dict()) == cuda


@pytest.mark.parametrize('spec_path,stages,message', [
    ('config/specs/pi05_tiny_random.yaml', ['denoise'], 'only the cuda backend'),
    ('config/specs/pi05_tiny_cuda.yaml', ['vision', 'prefix', 'denoise'], 'every stage'),
    ('config/specs/pi05_tiny_cuda.yaml', ['denoiser'], 'not nodes of the graph'),
])
def test_side_stream_refusals_name_the_problem(tiny_graph, respec, spec_path, stages, message):
    spec = _with_side_stream(load_spec(spec_path), respec, stages)
    with pytest.raises(ValueError, match=message):
        _groups(tiny_graph, spec)
