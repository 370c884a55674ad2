"""The device letterbox on pi05_tiny, on the CPU (compiler/device_letterbox.py).

The tiny spec's cuda twin cannot be built here (its groups export on a GPU), so the rewrite is
applied as compile_spec applies it, after the passes, to the traced graph, and the rewritten
graph is run the way the artifact runs it: its host group by the host backend's runner, the
frames through the cuda backend's input buffers (unpinned here), the vision stage's exported
program on the CPU (where `lamp::letterbox` runs its reference). The tokens equal those of the
same stage on the host-letterboxed pixels bit for bit, for cameras of every size, one past its
buffer, and an absent one.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from bench.gpu_pi05 import baseline_inputs
from lamp_ros.backends.cuda.compile_side import _frame_inputs
from lamp_ros.backends.cuda.run_side import HostInputs
from lamp_ros.backends.host import HostRunner
from lamp_ros.compiler.device_letterbox import frame_capacity, letterbox_on_device
from lamp_ros.compiler.parity import boundary_values, eager_names
from lamp_ros.compiler.partition import assign, partition
from lamp_ros.compiler.rewrites import run_passes
from lamp_ros.policies.pi05.rewrites import REWRITES
from lamp_ros.compiler.record_passes import record_passes, stage_modules
from lamp_ros.spec import load_spec, parse_spec, SpecError
from lamp_ros.ops.image import preprocess_image, stack_cameras
from lamp_ros.runtime.state import StateStore
from lamp_ros.trace.export import export_module
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline
from lamp_ros.whitebox.diff import diff_graph

SPEC = 'config/specs/pi05_tiny_cuda.yaml'
MAX_FRAMES = {'base': [480, 640], 'left_wrist': [224, 224], 'right_wrist': [224, 224]}


def _spec(interpolation='linear_exact', **fusion):
    """The tiny cuda spec (device letterbox on, linear_exact), changed."""
    spec = load_spec(SPEC)
    options = spec.policy['options']
    options = {**options, 'glue': {**options['glue'], 'interpolation': interpolation}}
    return type(spec)(**{**spec.__dict__, 'policy': {**spec.policy, 'options': options},
                         'fusion': {**spec.fusion, **fusion}})


@pytest.fixture(scope='module')
def rewritten():
    """The spec, the graph with the passes (`before`) and rewritten (`after`), the modules after
    the passes and after the rewrite (`moved`), the example values, the eager tick's names."""
    spec = _spec(device_letterbox=MAX_FRAMES)
    pipeline = build_pipeline(spec)
    example = {}
    graph = trace_pipeline(pipeline, pipeline.policy.example_observation(),
                           export=False, values_out=example)
    modules, results = run_passes(REWRITES, stage_modules(graph, pipeline.policy), spec.passes)
    eager_values = set(example)  # every value of one traced eager tick
    after, moved = letterbox_on_device(graph, modules, MAX_FRAMES, example,
                                       REWRITES.letterbox_stage)
    after = record_passes(after, moved, results)  # as compile_spec records them
    return SimpleNamespace(spec=spec, before=record_passes(graph, modules, results), after=after,
                           modules=modules, moved=moved, example=example,
                           eager_values=eager_values)


def test_graph_moves_the_cameras_onto_the_vision_stage(rewritten):
    before, after = rewritten.before, rewritten.after
    ids = [n.id for n in after.nodes]
    assert 'stack_cameras' not in ids and not any(i.startswith('preprocess_image') for i in ids)
    host, vision = after.node('letterbox_frames'), after.node('vision')
    assert host.inputs == ('images.base', 'images.left_wrist', 'images.right_wrist')
    assert host.attrs['capacity'] == {'base': 921600, 'left_wrist': 150528,
                                      'right_wrist': 150528}
    assert vision.inputs == (*host.outputs[:3], 'letterbox_frames.geometry')
    assert vision.attrs['letterbox']['max_frame'] == MAX_FRAMES
    assert str(after.values['letterbox_frames.geometry']) == 'int32[1,3,2,224,4]'
    assert 'letterbox_frames.image_mask' in after.node('prefix').inputs
    report = diff_graph(before, after)  # what `lamp diff` prints for the two graphs
    assert report['nodes_added'] == ['letterbox_frames']
    assert sorted(report['nodes_removed']) == [
        'preprocess_image.base', 'preprocess_image.left_wrist', 'preprocess_image.right_wrist',
        'stack_cameras']
    change = report['nodes_changed']['vision']
    assert 'letterbox' in change['attrs'] and change['ports'][1][-1] == 'geometry'
    assert 'prefix' not in report['nodes_changed']  # same types, another producer's name
    type(after).from_json(after.to_json())  # saved hashes check out


def test_parity_knows_which_boundary_values_the_eager_pipeline_has(rewritten):
    """run_parity compares the mask with the eager stack_cameras' and skips the frames and
    tables (the eager pipeline never makes them), comparing what is computed from them."""
    spec, after = rewritten.spec, rewritten.after
    plan = type('Plan', (), {'groups': partition(after, spec, assign(after, spec))})
    aliases = eager_names(after)
    assert aliases == {'letterbox_frames.image_mask': 'stack_cameras.image_mask'}
    missing = [v for v in boundary_values(plan, after)
               if aliases.get(v, v) not in rewritten.eager_values]
    assert missing == [*after.node('letterbox_frames').outputs[:4]]


def test_partition_puts_the_frames_into_the_cuda_group(rewritten):
    spec, after = rewritten.spec, rewritten.after
    groups = partition(after, spec, assign(after, spec))
    cuda = next(g for g in groups if g.backend == 'cuda')
    frames = _frame_inputs(after, cuda)
    assert frames == after.node('letterbox_frames').outputs[:3]
    assert cuda.nodes[0] == 'vision' and set(frames) < set(cuda.inputs)
    host = next(g for g in groups if 'letterbox_frames' in g.nodes)
    assert host.nodes == ('letterbox_frames',)


OBSERVATIONS = {
    'as_declared': {'base': (480, 640), 'left_wrist': (224, 224), 'right_wrist': (224, 224)},
    'smaller_and_portrait': {'base': (240, 320), 'left_wrist': (200, 120),
                             'right_wrist': (96, 128)},
    'past_its_buffer': {'base': (720, 1280), 'left_wrist': (224, 224), 'right_wrist': (224, 225)},
    'absent_camera': {'base': (480, 640), 'left_wrist': (224, 224)},
}


@pytest.mark.parametrize('case', sorted(OBSERVATIONS))
def test_artifact_path_makes_the_host_paths_tokens(rewritten, case):
    spec, after, example = rewritten.spec, rewritten.after, rewritten.example
    modules, moved = rewritten.modules, rewritten.moved
    rng = np.random.default_rng(len(case))
    images = {slot: rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
              for slot, hw in OBSERVATIONS[case].items()}
    groups = partition(after, spec, assign(after, spec))
    host = next(g for g in groups if 'letterbox_frames' in g.nodes)
    runner = HostRunner(host, after, {}, StateStore())
    made = runner.run({f'images.{s}': images.get(s) for s in MAX_FRAMES})
    vision = after.node('vision')
    specs = [{'shape': list(np.shape(example[v])), 'dtype': str(np.asarray(example[v]).dtype),
              'frame': v in vision.attrs['letterbox']['frames']} for v in vision.inputs]
    buffers = HostInputs(torch, vision.inputs, specs, pin_memory=False)
    for buffer in buffers.buffers:
        buffer.fill_(173)  # stale bytes from an earlier call
    buffers.fill(made)
    program, _, _ = export_module(moved['vision'], buffers.buffers)
    with torch.no_grad():
        tokens = program.module()(*buffers.buffers)

    pixels, mask = stack_cameras(
        {s: preprocess_image(img, 224, 'linear_exact') for s, img in images.items()},
        tuple(MAX_FRAMES), 224)
    with torch.no_grad():
        expected = modules['vision'](torch.from_numpy(pixels))
    assert torch.equal(tokens, expected)
    np.testing.assert_array_equal(made['letterbox_frames.image_mask'], mask)
    # the GPU bench's baselines read the pixels the device makes, from the same capture
    cuda = next(g for g in groups if g.backend == 'cuda')
    baseline = baseline_inputs(after, cuda, {**example, **made})
    np.testing.assert_array_equal(baseline[0], pixels)
    np.testing.assert_array_equal(baseline[1], mask)
    assert len(baseline) == 5  # pixels, image mask, token ids, token mask, noise


def test_subgraph_names_the_device_operator():
    spec = _spec(device_letterbox=MAX_FRAMES)
    pipeline = build_pipeline(spec)
    example = {}
    graph = trace_pipeline(pipeline, pipeline.policy.example_observation(),
                           export=False, values_out=example)
    modules = stage_modules(graph, pipeline.policy)  # passes off: the eager stage, lowered
    after, moved = letterbox_on_device(graph, modules, MAX_FRAMES, example,
                                       REWRITES.letterbox_stage)
    assert moved['vision'] is not modules['vision']
    assert not getattr(modules['vision'], 'letterbox', False)  # the eager module as it was
    args = [torch.as_tensor(example[v]) for v in after.node('vision').inputs]
    _, ops, _ = export_module(moved['vision'], args)  # as record_passes exports it
    assert ops.op_counts['lamp.letterbox.default'] == 1
    assert example['letterbox_frames.frame.base'].shape == (frame_capacity([480, 640], 224),)


def test_needs_linear_exact_and_every_camera(rewritten):
    before, modules, example = rewritten.before, rewritten.modules, rewritten.example
    spec = _spec('linear')
    pipeline = build_pipeline(spec)
    graph = trace_pipeline(pipeline, pipeline.policy.example_observation(),
                           export=False)
    on_frames = REWRITES.letterbox_stage
    with pytest.raises(ValueError, match='preprocess_image must resize with linear_exact'):
        letterbox_on_device(graph, modules, MAX_FRAMES, dict(example), on_frames)
    with pytest.raises(ValueError, match=r"each camera slot \['base', 'left_wrist', "):
        letterbox_on_device(before, modules, {'base': [480, 640]}, dict(example), on_frames)
    with pytest.raises(ValueError, match='the policy registers no form of its vision stage'):
        letterbox_on_device(before, modules, MAX_FRAMES, dict(example))


def test_spec_checks_the_frames_and_the_target():
    """The cuda specs turn it on; a bad frame or a target without a GPU is refused."""
    text = open(SPEC, encoding='utf-8').read()
    assert parse_spec(yaml.safe_load(text), source=SPEC).fusion['device_letterbox'] == MAX_FRAMES
    assert load_spec('config/specs/pi05_full.yaml').fusion['device_letterbox'] == MAX_FRAMES
    with pytest.raises(SpecError, match=r'device_letterbox.base: the largest frame'):
        parse_spec(yaml.safe_load(text.replace('[480, 640]', '[480]')), source=SPEC)
    cpu = text.replace('target: cuda', 'target: cpu').replace('backend: cuda',
                                                              'backend: onnxruntime')
    with pytest.raises(SpecError, match="this spec's target is 'cpu'"):
        parse_spec(yaml.safe_load(cpu), source=SPEC)
