"""TensorRT backend: the ONNX it feeds TensorRT is checked here with ONNX Runtime, always.

TensorRT cannot be installed on the development machines, so the engine tests (build, load,
run, parity) skip there; the ONNX they start from, the refusals without TensorRT and the
truncated-engine check run everywhere.
"""

import importlib.util
import json
import os

import numpy as np
import pytest

from lamp_ros.backends import trt as trt_backend
from lamp_ros.artifact.plan import GroupSpec
from lamp_ros.backends.base import BackendUnavailable, CompileContext, LoadContext

HAS_TRT = importlib.util.find_spec('tensorrt') is not None
HAS_TRT_RUNTIME = HAS_TRT or importlib.util.find_spec('tensorrt_lean') is not None


def _load_ctx(root):
    return LoadContext(str(root), None, 'cuda:0', {}, None)


@pytest.fixture(scope='module')
def traced():
    """pi05_tiny traced once: graph, eager pipeline, and every value of the eager run."""
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline

    spec = load_spec('config/specs/pi05_tiny_random.yaml')
    pipe = build_pipeline(spec)
    values = {}
    graph = trace_pipeline(pipe, pipe.policy.example_observation(), export=False,
                           values_out=values)
    return graph, pipe, values


def vision_ctx(traced, root, precision='fp32', build=None):
    graph, pipe, values = traced
    node = graph.node('vision')
    group = GroupSpec(name='vision_trt', backend='tensorrt', precision=precision,
                      device='cuda:0', nodes=('vision',), inputs=node.inputs,
                      outputs=node.outputs, build=build or {})
    return CompileContext(graph, group, root=str(root),
                          modules={'vision': pipe.policy.model.vision}, example=values)


def onnx_io(model):
    return [i.name for i in model.graph.input], [o.name for o in model.graph.output]


def test_supports_model_stages_only(traced):
    graph = traced[0]
    ok, reason = trt_backend.supports(graph.node('vision'))
    assert ok and 'TensorRT' in reason
    host = next(n for n in graph.nodes if n.kind != 'model')
    assert trt_backend.supports(host)[0] is False
    assert trt_backend.device_for('tensorrt') == 'cuda:0'


def test_engine_onnx_matches_eager_with_onnxruntime(traced, tmp_path):
    import onnx
    import onnxruntime as ort

    ctx = vision_ctx(traced, tmp_path)
    rel = trt_backend.export_engine_onnx(ctx)
    assert rel == 'groups/vision_trt/trt_input.onnx'
    path = os.path.join(tmp_path, rel)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    assert len(model.graph.initializer) > 0, 'TensorRT needs the weights inside the ONNX'
    assert onnx_io(model) == (list(ctx.group.inputs), list(ctx.group.outputs))

    values = traced[2]
    session = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    feeds = {v: np.asarray(values[v]) for v in ctx.group.inputs}
    (tokens,) = session.run(['vision.image_tokens'], feeds)
    expected = np.asarray(values['vision.image_tokens'])
    assert tokens.shape == expected.shape
    np.testing.assert_allclose(tokens, expected, atol=1e-4, rtol=0)


def test_engine_onnx_carries_group_precision(traced, tmp_path):
    """Strongly typed TensorRT builds what the ONNX says: fp16 must be in the file."""
    import onnx
    from onnx import TensorProto

    ctx = vision_ctx(traced, tmp_path, precision='fp16')
    model = onnx.load(os.path.join(tmp_path, trt_backend.export_engine_onnx(ctx)))
    # the camera pixels stay uint8 (the encoder maps them to [-1, 1] inside); the tokens are fp16
    assert [v.type.tensor_type.elem_type for v in model.graph.input] == [TensorProto.UINT8]
    io_types = [v.type.tensor_type.elem_type for v in model.graph.output]
    assert io_types == [TensorProto.FLOAT16] * len(io_types)
    weights = [i for i in model.graph.initializer if len(i.dims) >= 2]
    assert weights and all(i.data_type == TensorProto.FLOAT16 for i in weights)
    vision = traced[1].policy.model.vision
    assert all(p.dtype.is_floating_point and p.dtype.itemsize == 4 for p in vision.parameters()), \
        'export must not cast the eager module in place'


def test_engine_onnx_rejects_unknown_precision(traced, tmp_path):
    with pytest.raises(ValueError, match='precision'):
        trt_backend.export_engine_onnx(vision_ctx(traced, tmp_path, precision='int8'))


@pytest.mark.skipif(HAS_TRT, reason='tensorrt is installed')
def test_compile_without_tensorrt_is_unavailable(traced, tmp_path):
    with pytest.raises(BackendUnavailable, match='tensorrt'):
        trt_backend.compile(vision_ctx(traced, tmp_path))


def fake_engine(root, size=64, recorded=None):
    rel = 'groups/g/model.engine'
    os.makedirs(os.path.join(root, 'groups/g'))
    with open(os.path.join(root, rel), 'wb') as f:
        f.write(b'\0' * size)
    return GroupSpec(name='g', backend='tensorrt', precision='fp32', device='cuda:0',
                     nodes=('vision',), inputs=('x',), outputs=('y',),
                     build={'engine': rel, 'engine_bytes': recorded or size})


@pytest.mark.skipif(HAS_TRT_RUNTIME, reason='a tensorrt runtime is installed')
def test_load_without_tensorrt_is_unavailable(tmp_path):
    with pytest.raises(BackendUnavailable, match='tensorrt'):
        trt_backend.load(fake_engine(tmp_path), _load_ctx(str(tmp_path)))


def test_load_rejects_truncated_engine(tmp_path):
    group = fake_engine(tmp_path, size=64, recorded=100)
    with pytest.raises(ValueError, match='model.engine.*truncated'):
        trt_backend.load(group, _load_ctx(str(tmp_path)))


# ---- with TensorRT (GPU machines with TensorRT only) -----------------------------------------

@pytest.fixture
def built(traced, tmp_path):
    pytest.importorskip('tensorrt')
    pytest.importorskip('cuda.bindings.runtime')
    ctx = vision_ctx(traced, tmp_path)
    build = trt_backend.compile(ctx)
    group = GroupSpec.from_dict({**ctx.group.to_dict(), 'build': build.metadata})
    return build, group, str(tmp_path)


def test_compile_writes_engine_cache_and_inspector(built):
    build, group, root = built
    for rel in build.files:
        assert os.path.getsize(os.path.join(root, rel)) > 0, rel
    meta = build.metadata
    assert set(meta['io']) == {*group.inputs, *group.outputs}
    assert meta['io']['vision.image_tokens'] == {'dtype': 'float32', 'shape': [1, 3, 64, 128],
                                                 'mode': 'output'}
    with open(os.path.join(root, meta['inspector'])) as f:
        assert json.load(f)['Layers'], 'inspector JSON lists the engine layers'
    json.dumps(meta)  # plan.json carries it


def test_engine_runs_with_parity(built, traced):
    _, group, root = built
    values = traced[2]
    runner = trt_backend.load(group, _load_ctx(root))
    try:
        feeds = {v: np.asarray(values[v]) for v in group.inputs}
        for _ in range(2):  # buffers are reused between calls
            out = runner.run(feeds)
            np.testing.assert_allclose(out['vision.image_tokens'],
                                       np.asarray(values['vision.image_tokens']),
                                       atol=1e-3, rtol=1e-3)
        bad = {v: np.zeros((1, 2), np.float32) for v in group.inputs}
        with pytest.raises(ValueError, match=group.inputs[0]):
            runner.run(bad)
    finally:
        runner.close()
        runner.close()


def test_load_rejects_cut_engine(built):
    build, group, root = built
    path = os.path.join(root, build.metadata['engine'])
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(ValueError, match='model.engine'):
        trt_backend.load(group, _load_ctx(root))
