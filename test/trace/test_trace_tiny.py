"""Tracing pi05_tiny through `lamp trace`: stages, types, state, subgraphs, hashes, errors."""

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from lamp_ros.cli import main
from lamp_ros.spec import load_spec
from lamp_ros.graph.graph import Graph
from lamp_ros.policies.pi05.pipeline import pipeline_from_spec
from lamp_ros.trace.from_spec import trace_pipeline
from lamp_ros.trace.stage import stage
from lamp_ros.trace.tracer import trace, TraceError

SPEC = 'config/specs/pi05_tiny_random.yaml'
STAGES = ['normalize_state', 'discretize_state', 'tokenize', 'preprocess_image.base',
          'preprocess_image.left_wrist', 'preprocess_image.right_wrist', 'stack_cameras',
          'vision', 'prefix', 'sample_noise', 'denoise', 'unnormalize_actions', 'chunker',
          'smoother', 'clamp']


@pytest.fixture(scope='module')
def traced(tmp_path_factory):
    out = tmp_path_factory.mktemp('trace') / 'graph.json'
    assert main(['trace', SPEC, '--out', str(out)]) == 0
    text = out.read_text()
    return json.loads(text), Graph.from_json(text), out


def test_stages_in_topological_order(traced):
    _, graph, _ = traced
    assert [n.id for n in graph.nodes] == STAGES
    graph.lint()  # every input produced before use


def test_graph_json_contract(traced):
    data, _, _ = traced
    assert {'nodes', 'edges'} <= set(data)
    for node in data['nodes']:
        assert {'id', 'op', 'kind', 'hash'} <= set(node)
    for edge in data['edges']:
        assert {'src', 'dst', 'type'} <= set(edge)
        assert {'dtype', 'shape', 'device', 'role', 'lifetime'} <= set(edge['type'])
        assert edge['type']['dtype'] and edge['type']['device']


def test_edges_typed_from_actual_values(traced):
    _, graph, _ = traced
    types = {(e.src, e.value): e.type for e in graph.edges}
    assert str(types[('vision', 'vision.image_tokens')]) == 'float32[1,3,64,128]'
    assert str(types[('prefix', 'prefix.k_cache')]) == 'float32[2,1,288,1,32]'
    assert str(types[('@input', 'images.base')]) == 'uint8[base_h,base_w,3] input'
    assert types[('tokenize', 'tokenize.token_ids')].dtype == 'int64'


def test_stateful_stages_have_episode_state_edges(traced):
    _, graph, _ = traced
    loops = {}
    for e in graph.edges:
        if e.src == e.dst:
            loops.setdefault(e.src, []).append(e.type)
    assert set(loops) == {'sample_noise', 'chunker', 'smoother', 'clamp'}
    for types in loops.values():
        assert all(t.lifetime == 'episode' and t.role == 'state' for t in types)
    assert len(loops['chunker']) == 5  # plan_sum, plan_wsum, plan_count, t0, valid


def test_model_stages_have_op_level_subgraphs(traced):
    _, graph, _ = traced
    for node_id in ('vision', 'prefix', 'denoise'):
        node = graph.node(node_id)
        assert node.kind == 'model'
        assert node.subgraph is not None and len(node.subgraph.ops) > 10
        counts = node.meta['op_counts']
        assert sum(counts.values()) == len(node.subgraph.ops)
        assert counts.get('aten.linear.default', 0) > 0
        assert node.weights and all(len(w['sha256']) == 64 for w in node.weights.values())
    assert graph.node('vision').meta['op_counts']['aten.conv2d.default'] == 1
    # The denoise loop is unrolled: 10 steps x (2 layers x 7 + in/out/time) linears.
    assert graph.node('denoise').meta['op_counts']['aten.linear.default'] == 230


def test_json_round_trip_equal(traced):
    _, graph, _ = traced
    assert Graph.from_json(graph.to_json()) == graph


def _hashes(**spec_changes):
    spec = load_spec(SPEC)
    spec = type(spec)(**{**spec.__dict__, **spec_changes})
    pipeline = pipeline_from_spec(spec)
    obs = pipeline.policy.example_observation()
    return trace_pipeline(pipeline, obs, export=False).hashes()


def test_vision_weight_change_changes_only_the_vision_hash():
    base = _hashes()
    changed = _hashes(weights={'seed': 0, 'stage_seeds': {'vision': 99}})
    assert {k for k in base if base[k] != changed[k]} == {'vision'}


def test_unhashed_trace_is_hashed_by_record_passes_as_the_trace_would():
    """Parity's eager references and a build with passes trace without hashing the weights
    (the full policy's take ~10 s a trace); record_passes then hashes every model node that
    has none, to the same sha256 as a hashing trace."""
    from lamp_ros.compiler.record_passes import record_passes, stage_modules
    pipeline = pipeline_from_spec(load_spec(SPEC))
    obs = pipeline.policy.example_observation()
    values = {}
    bare = trace_pipeline(pipeline, obs, export=False, values_out=values, hash_weights=False)
    hashed = trace_pipeline(pipeline, obs, export=False)
    models = [n.id for n in hashed.nodes if n.kind == 'model']
    assert models == ['vision', 'prefix', 'denoise'] and 'denoise.actions' in values
    assert all(not bare.node(m).weights and hashed.node(m).weights for m in models)
    filled = record_passes(bare, stage_modules(bare, pipeline.policy), {})
    assert all(filled.node(m).weights == hashed.node(m).weights for m in models)
    assert filled.hashes() == hashed.hashes()


def test_interpolation_change_changes_only_preprocessing():
    base = _hashes()
    spec = load_spec(SPEC)
    options = spec.policy['options']
    changed = _hashes(policy={**spec.policy, 'options': {
        **options, 'glue': {**options['glue'], 'interpolation': 'area'}}})
    assert {k for k in base if base[k] != changed[k]} == {
        'preprocess_image.base', 'preprocess_image.left_wrist', 'preprocess_image.right_wrist'}


def test_tracing_does_not_change_results():
    spec = load_spec(SPEC)
    pipeline = pipeline_from_spec(spec)
    obs = pipeline.policy.example_observation(seed=3)
    eager = pipeline.tick(obs, 0.0)
    pipeline.reset()
    trace_pipeline(pipeline, obs, export=False)
    np.testing.assert_array_equal(pipeline.tick(obs, 0.0), eager)


def test_lamp_graph_prints_and_draws(traced, capsys):
    _, _, path = traced
    svg = path.with_suffix('.svg')
    assert main(['graph', str(path), '--svg', str(svg)]) == 0
    printed = capsys.readouterr().out
    assert 'denoise' in printed and 'episode' in printed
    root = ET.parse(svg).getroot()
    assert root.tag.endswith('svg')
    assert sum(1 for el in root.iter() if el.tag.endswith('rect')) >= len(STAGES)


class _Toy:
    """A pipeline with a glue line outside any stage: the tracer cannot follow it."""

    state = {}

    @stage('double', 'host', outputs=('y',))
    def double(self, x):
        return x * 2

    @stage('negate', 'host', outputs=('y',))
    def negate(self, x):
        return -x

    def run(self, x):
        y = self.double(x)
        y = y + 1  # computed outside a stage
        return self.negate(y)


def test_untraceable_glue_names_stage_line_and_fix():
    toy = _Toy()
    with pytest.raises(TraceError) as err:
        trace(toy.run, {'x': np.ones(3)}, objects=[toy], export=False)
    msg = str(err.value)
    assert msg.startswith('stage negate (test/trace/test_trace_tiny.py:')
    assert "argument 'x' (float64[3])" in msg and 'compute it inside a @stage method' in msg


def test_stage_called_twice_needs_a_key():
    toy = _Toy()

    def run(x):
        return toy.double(toy.double(x))
    with pytest.raises(TraceError, match='called twice in one trace'):
        trace(run, {'x': np.ones(3)}, objects=[toy], export=False)
