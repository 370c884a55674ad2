"""A spec's `robot:` section: parsed and checked with the field named, limits from a URDF
(test/data/robots/ur5e.urdf, UR's published limits), the clamp and the ABI taken from it."""

import json
import math
import os
import shutil

import pytest
import yaml

from lamp_ros.spec import load_spec, SpecError
from lamp_ros.spec.robot import parse_robot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
ROBOTS = os.path.join(ROOT, 'config', 'robots')
DATA = os.path.join(ROOT, 'test', 'data', 'robots')
UR5E = ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
        'wrist_2_joint', 'wrist_3_joint']


def robot(**changes) -> dict:
    with open(os.path.join(ROBOTS, 'arm6_gripper.yaml'), encoding='utf-8') as f:
        d = yaml.safe_load(f)
    d.update(changes)
    return d


def spec_with(tmp_path, robot_section, base='config/specs/pi05_tiny_random.yaml', **extra) -> str:
    with open(os.path.join(ROOT, base), encoding='utf-8') as f:
        d = yaml.safe_load(f)
    d['robot'] = robot_section
    d['control'].pop('clamp', None)
    d.update(extra)
    path = tmp_path / 'spec.yaml'
    path.write_text(yaml.safe_dump(d))
    return str(path)


def test_bundled_robots_parse():
    for name in ('sim7', 'arm6_gripper'):
        r = parse_robot({'file': f'{name}.yaml'}, ROBOTS, 22.0)
        assert len(r.joints) == 7 and r.action == {'kind': 'absolute'}
    r = parse_robot({'file': 'arm6_gripper.yaml'}, ROBOTS, 22.0)
    assert r.cameras['base'].compressed and set(r.cameras) == {'base', 'left_wrist'}


def test_urdf_fills_what_the_robot_file_leaves_out():
    d = {'name': 'ur5e', 'urdf': 'ur5e.urdf',
         'joints': [{'name': n} for n in UR5E[:5]] + [{'name': UR5E[5], 'max_step': 0.01}],
         'cameras': {}}
    r = parse_robot(d, DATA, 20.0)
    assert r.joints[2].lower == pytest.approx(-math.pi, abs=1e-5)
    assert r.joints[0].upper == pytest.approx(2 * math.pi, abs=1e-5)
    assert r.joints[0].max_step == pytest.approx(math.pi / 20.0, abs=1e-5)  # velocity / rate
    assert r.joints[5].max_step == 0.01  # the robot file wins


def test_the_spec_takes_clamp_and_abi_from_the_robot(tmp_path):
    spec = load_spec(spec_with(tmp_path, {'file': os.path.join(ROBOTS, 'arm6_gripper.yaml')}))
    assert spec.control['clamp']['upper'][2] == 3.1416
    assert spec.control['clamp']['max_step'] == [0.05] * 6 + [0.01]
    assert spec.robot.joint_names[-1] == 'gripper'
    # control.clamp, when given, overrides key by key
    with open(spec.source, encoding='utf-8') as f:
        d = yaml.safe_load(f)
    d['control']['clamp'] = {'max_step': [0.01] * 7}
    (tmp_path / 'spec.yaml').write_text(yaml.safe_dump(d))
    spec = load_spec(str(tmp_path / 'spec.yaml'))
    assert spec.control['clamp']['max_step'] == [0.01] * 7
    assert spec.control['clamp']['lower'][0] == -6.2832


@pytest.mark.parametrize('change,message', [
    (lambda d: d['joints'].append(dict(d['joints'][0])),
     "robot.joints: ['shoulder_pan'] listed twice"),
    (lambda d: d['joints'][1].update(lower=1.0, upper=1.0),
     'robot.joints[1]: lower 1.0 must be below upper 1.0 (shoulder_lift)'),
    (lambda d: d['joints'][0].update(max_step=0),
     'robot.joints[0].max_step: must be > 0'),
    (lambda d: d['joints'][0].pop('upper'), 'robot.joints[0].upper: missing (or a urdf)'),
    (lambda d: d['joints'][0].update(speed=3), 'robot.joints[0].speed: unknown key'),
    (lambda d: d.update(action={'kind': 'delta', 'mask': [True] * 6}),
     'robot.action.mask: 6 values for 7 joints'),
    (lambda d: d.update(action={'kind': 'velocity'}), "robot.action.kind: 'velocity'"),
    (lambda d: d.update(action={'kind': 'absolute', 'mask': [True] * 7}),
     'robot.action.mask: only for kind delta'),
    (lambda d: d['cameras']['base'].update(encoding='h264'),
     "robot.cameras.base.encoding: 'h264'; one of jpeg, png, rgb8, bgr8, mono8"),
    (lambda d: d['cameras']['base'].update(topic='camera'),
     "robot.cameras.base.topic: an absolute topic name, got 'camera'"),
    (lambda d: d['cameras']['base'].pop('width'), 'robot.cameras.base.width: missing'),
    (lambda d: d['cameras']['left_wrist'].update(topic=d['cameras']['base']['topic']),
     'robot.cameras: topic'),
    (lambda d: d.update(norm_stats='nowhere.json'), 'robot.norm_stats: no file'),
    (lambda d: d.update(gripper='2f85'), 'robot.gripper: unknown key'),
])
def test_bad_robot_names_the_field(change, message):
    d = robot()
    change(d)
    with pytest.raises(SpecError, match=None) as err:
        parse_robot(d, ROBOTS, 22.0)
    assert message in str(err.value), str(err.value)


def test_a_joint_the_urdf_does_not_have(tmp_path):
    d = {'name': 'ur5e', 'urdf': 'ur5e.urdf', 'joints': [{'name': 'shoulder_yaw_joint'}],
         'cameras': {}}
    with pytest.raises(SpecError) as err:
        parse_robot(d, DATA, 22.0)
    assert "robot.joints[0].name: 'shoulder_yaw_joint' is not a joint of" in str(err.value)
    assert 'elbow_joint' in str(err.value)


def test_robot_against_the_policy(tmp_path):
    """Checked when the pipeline is built: joint count, camera slots, norm stats' dims."""
    from lamp_ros.trace.from_spec import build_pipeline
    six = robot(joints=robot()['joints'][:6])
    with pytest.raises(SpecError, match=r'robot: 6 joints .*; the norm stats have 7'):
        build_pipeline(load_spec(spec_with(tmp_path, six)))
    wrong_slot = robot()
    wrong_slot['cameras']['top'] = wrong_slot['cameras'].pop('base')
    with pytest.raises(SpecError, match=r"robot.cameras: \['top'\] are not camera slots of the "
                                        r'model \(base, left_wrist, right_wrist\)'):
        build_pipeline(load_spec(spec_with(tmp_path, wrong_slot)))
    stats = tmp_path / 'stats.json'
    q = {'mean': [0.0] * 5, 'std': [1.0] * 5, 'q01': [-1.0] * 5, 'q99': [1.0] * 5}
    stats.write_text(json.dumps({'norm_stats': {'state': q, 'actions': q}}))
    with pytest.raises(SpecError, match='stats for 5 dims, the robot has 7 joints'):
        build_pipeline(load_spec(spec_with(tmp_path, robot(norm_stats=str(stats)))))


def test_robot_norm_stats_in_openpi_layout(tmp_path):
    from lamp_ros.trace.from_spec import build_pipeline
    stats = tmp_path / 'stats.json'
    q = {'mean': [0.0] * 7, 'std': [1.0] * 7, 'q01': [-0.5] * 7, 'q99': [0.5] * 7}
    stats.write_text(json.dumps({'norm_stats': {'state': q, 'actions': q}}))
    pipeline = build_pipeline(load_spec(spec_with(tmp_path, robot(norm_stats=str(stats)))))
    policy = pipeline.policy
    assert policy.joint_names == tuple(robot()['joints'][i]['name'] for i in range(7))
    assert policy.robot.state.stats['q99'].tolist() == [0.5] * 7


def test_robot_file_relative_to_the_spec(tmp_path):
    shutil.copy(os.path.join(ROBOTS, 'arm6_gripper.yaml'), tmp_path / 'arm.yaml')
    spec = load_spec(spec_with(tmp_path, {'file': 'arm.yaml'}))
    assert spec.robot.name == 'arm6_gripper'
