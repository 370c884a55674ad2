"""An artifact built for a robot file: the robot's joint names and cameras in the ABI, its limits
in the clamp, and delta actions (openpi's convention) computed as the eager reference does."""

import os

import numpy as np
import pytest
import yaml

from lamp_ros.runtime import Runtime
from lamp_ros.spec import load_spec
from lamp_ros.trace.from_spec import build_pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
MASK = [True] * 6 + [False]  # the arm's joints are deltas, the gripper absolute


@pytest.fixture(scope='module')
def delta_robot(tmp_path_factory):
    """(spec path, artifact): pi05_tiny for arm6_gripper with delta actions."""
    folder = tmp_path_factory.mktemp('robot')
    with open(os.path.join(ROOT, 'config', 'robots', 'arm6_gripper.yaml'), encoding='utf-8') as f:
        robot = yaml.safe_load(f)
    robot['action'] = {'kind': 'delta', 'mask': MASK}
    (folder / 'arm.yaml').write_text(yaml.safe_dump(robot))
    spec_file = os.path.join(ROOT, 'config', 'specs', 'pi05_tiny_random.yaml')
    with open(spec_file, encoding='utf-8') as f:
        spec = yaml.safe_load(f)
    spec['control'].pop('clamp', None)
    spec['robot'] = {'file': 'arm.yaml'}
    spec['fusion']['text_lengths'] = []  # one ONNX export instead of three: the test is the robot
    (folder / 'spec.yaml').write_text(yaml.safe_dump(spec))
    from lamp_ros.cli import main
    assert main(['compile', str(folder / 'spec.yaml'), '--out', str(folder / 'art')]) == 0
    return str(folder / 'spec.yaml'), str(folder / 'art')


def test_abi_and_clamp_follow_the_robot(delta_robot):
    _, artifact = delta_robot
    runtime = Runtime.load(artifact)
    abi = runtime.artifact.manifest['abi']
    assert runtime.joint_names[0] == 'shoulder_pan'
    assert abi['robot']['name'] == 'arm6_gripper'
    assert abi['robot']['cameras']['base'] == {
        'topic': '/camera/base/image_raw/compressed', 'encoding': 'jpeg', 'width': 640,
        'height': 480}
    assert abi['robot']['action'] == {'kind': 'delta', 'mask': MASK}
    clamp = next(n for n in runtime.artifact.graph.nodes if n.op == 'clamp')
    assert clamp.attrs['upper'][2] == 3.1416 and clamp.attrs['max_step'] == [0.05] * 6 + [0.01]


def test_delta_actions_are_added_to_the_state(delta_robot):
    """The chunk the artifact hands its chunker is the policy's chunk plus the state for the
    masked joints (openpi's AbsoluteActions), and equals the eager reference's."""
    spec, artifact = delta_robot
    pipeline = build_pipeline(load_spec(spec))
    obs = pipeline.example_observation(seed=5)
    del obs['images']['right_wrist']  # not on this robot: masked off
    obs['state'] = obs['state'] + np.linspace(-0.3, 0.3, 7).astype(np.float32)
    pipeline.reset()
    raw = pipeline.policy.infer(obs)
    expected = raw + np.where(MASK, obs['state'], 0.0)[None, :]
    np.testing.assert_array_equal(pipeline.to_absolute(raw, obs['state']),
                                  expected.astype(np.float32))
    assert not np.allclose(expected[:, :6], raw[:, :6])
    np.testing.assert_array_equal(expected[:, 6], raw[:, 6])
    runtime = Runtime.load(artifact)
    runtime.reset()
    np.testing.assert_allclose(runtime.infer(obs), expected, atol=1e-4, rtol=1e-4)
    graph = runtime.artifact.graph
    node = next(n for n in graph.nodes if n.op == 'delta_to_absolute')
    assert node.attrs['mask'] == MASK
