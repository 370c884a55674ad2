"""act_small, the ACT-style reference policy (a CNN per camera + a standard torch.nn.Transformer,
no language, mean/std normalisation, cameras `front` and `side`), compiled for the CPU: its
interface reaches the artifact, its transformer exports to ONNX, and the Runtime computes what
the eager policy computes."""

import json
import os

import numpy as np
import onnx
import pytest

from lamp_ros.runtime import Runtime
from lamp_ros.spec import load_spec, SpecError
from lamp_ros.trace.from_spec import build_pipeline

SPEC = 'config/specs/act_small.yaml'


def _json(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8') as f:
        return json.load(f)


def test_its_interface_is_the_artifacts(act_small_artifact):
    abi = _json(act_small_artifact, 'manifest.json')['abi']
    assert abi['camera_slots'] == ['front', 'side'] and abi['prompt'] is False
    assert abi['joint_names'][-1] == 'gripper' and len(abi['joint_names']) == 7
    assert 'prompt' not in abi['inputs']
    assert not os.path.exists(os.path.join(act_small_artifact, 'resources'))  # no tokenizer
    parity = _json(act_small_artifact, 'evidence/parity.json')
    assert parity['passed'] and parity['worst']['clamp.command']['max_abs'] <= 1e-4
    # every third parity sample goes without its last camera: the mask path is compared too
    assert any(s['cameras'] == ['front'] for s in parity['samples'])


def test_the_transformer_exports_as_plain_operators(act_small_artifact):
    """torch.nn's transformer layers take a fused fast path in inference that no exporter
    writes (nested tensors): the backend exports them with it off, by the torch.export-based
    exporter (the spec says `auto`), and the plan says so. Every weight stays stored once,
    in weights/ (the optimiser folds nothing into a weight), and nothing of the build machine
    (source paths in node metadata) is in the file."""
    plan = _json(act_small_artifact, 'plan.json')
    (group,) = [g for g in plan['groups'] if g['backend'] == 'onnxruntime']
    assert group['build']['exporter'] == 'dynamo'
    assert plan['options']['onnx_exporter'] == 'auto'
    model = onnx.load(os.path.join(act_small_artifact, group['build']['onnx']),
                      load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    assert {'MatMul', 'Softmax', 'Conv'} <= ops
    assert not [o for o in ops if 'nested' in o.lower() or 'MultiHead' in o], ops
    embedded = [i for i in model.graph.initializer
                if i.data_location != onnx.TensorProto.EXTERNAL]
    assert max((len(i.raw_data) for i in embedded), default=0) < 1024, \
        sorted((len(i.raw_data), i.name) for i in embedded)[-3:]
    assert all(i.name.startswith('stages.network.') for i in model.graph.initializer
               if i.data_location == onnx.TensorProto.EXTERNAL)
    assert not [n for n in model.graph.node if n.metadata_props or n.doc_string]


def test_the_runtime_computes_what_the_eager_policy_does(act_small_artifact):
    pipeline = build_pipeline(load_spec(SPEC))
    runtime = Runtime.load(act_small_artifact)
    for seed in range(3):
        obs = pipeline.example_observation(seed=seed)
        if seed == 2:
            obs['images'].pop('side')  # a missing camera
        assert 'prompt' not in obs
        pipeline.reset()
        runtime.reset()
        want = pipeline.tick(obs, 0.0)
        got = runtime.step(obs, 0.0)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
        pipeline.policy.reset()
        chunk = pipeline.policy.infer(obs)
        assert chunk.shape == (50, 7) and np.isfinite(chunk).all()
    # the cameras matter: another frame, another chunk
    one = pipeline.example_observation(seed=0)
    other = dict(one, images={**one['images'], 'front': 255 - one['images']['front']})
    assert np.abs(pipeline.policy.infer(one) - pipeline.policy.infer(other)).max() > 1e-3


def test_its_options_are_its_own():
    spec = load_spec(SPEC)
    bad = type(spec)(**{**spec.__dict__, 'policy': {**spec.policy,
                                                    'options': {'preset': 'pi05_tiny'}}})
    with pytest.raises(SpecError, match='policy.options.preset: unknown key; known: cameras'):
        build_pipeline(bad)


def test_a_bag_of_its_own_cameras_replays_exactly(act_small_artifact, tmp_path):
    """The regression tools read the artifact's camera slots, not pi0.5's: a bag generated with
    `front` and `side` replays through the artifact command for command."""
    from lamp_ros.regress.bag import read_bag
    from lamp_ros.regress.generate import generate_bag
    from lamp_ros.regress.replay import replay
    bag = str(tmp_path / 'bag')
    generate_bag(act_small_artifact, bag, seconds=1.0)
    assert {'/camera/front/image_raw/compressed', '/camera/side/image_raw/compressed'} <= \
        {m.topic for m in read_bag(bag)}
    report = replay(bag, act_small_artifact)
    assert report['passed'] and report['messages'] > 10, report['first_failure']
