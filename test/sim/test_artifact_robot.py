"""The robot `lamp sim` simulates for an artifact: the robot its spec named, or, for an artifact
built without one (act_small, point_reach: their specs have no `robot:`), the robot its
interface describes: its camera slots at their frame sizes, its joints within its clamp's
limits. What cannot be simulated is refused with the reason (edited copies of a real
artifact: the simulator reads manifest.json and graph.json, nothing it verifies)."""

import json
import math
import shutil

import pytest

from lamp_ros.sim.artifact_robot import robot_of_artifact

# config/specs/act_small.yaml control.clamp
LOWER = [-2.8, -1.9, -2.5, -2.9, -2.1, -2.9, 0.0]
UPPER = [2.8, 1.8, 2.3, 2.9, 2.2, 2.9, 0.08]
MAX_STEP = [0.15] * 6 + [0.01]


def test_an_artifact_without_a_robot_is_simulated_from_its_interface(act_small_artifact):
    with open(f'{act_small_artifact}/manifest.json', encoding='utf-8') as f:
        abi = json.load(f)['abi']
    assert 'robot' not in abi
    robot, source = robot_of_artifact(act_small_artifact)
    assert 'interface' in source and robot.name == 'act_small (interface)'
    assert list(robot.joint_names) == abi['joint_names']
    assert set(robot.cameras) == {'front', 'side'}
    for slot, camera in robot.cameras.items():
        assert camera.topic == f'/camera/{slot}/image_raw' and camera.encoding == 'rgb8'
        assert [camera.height, camera.width] == abi['camera_sizes'][slot]
    assert [j.lower for j in robot.joints] == LOWER
    assert [j.upper for j in robot.joints] == UPPER
    assert [j.max_step for j in robot.joints] == MAX_STEP


def test_one_camera_policy(point_reach_artifact):
    robot, _ = robot_of_artifact(point_reach_artifact)
    assert list(robot.cameras) == ['scene'] and len(robot.joints) == 7


def test_an_artifact_with_a_robot_gets_that_robot(tiny_artifact):
    robot, source = robot_of_artifact(tiny_artifact)
    assert robot.name == 'sim7' and 'the robot its spec named' in source


@pytest.fixture
def copy(act_small_artifact, tmp_path):
    """edit(file, change) on a copy of the act_small artifact -> the copy's path."""
    root = tmp_path / 'act_small'
    shutil.copytree(act_small_artifact, root)

    def edit(name: str, change) -> str:
        path = root / name
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
        return str(root)
    return edit


def _clamps(graph):
    return [n for n in graph['nodes'] if n['op'] == 'clamp']


def test_without_a_clamp_the_joints_are_unbounded(copy):
    def drop_clamp(graph):
        for node in _clamps(graph):
            node['op'] = 'not_a_clamp'
    robot, _ = robot_of_artifact(copy('graph.json', drop_clamp))
    assert all(j.lower == -math.inf and j.upper == math.inf for j in robot.joints)


@pytest.mark.parametrize('name,change,reason', [
    ('manifest.json', lambda m: m['abi'].update(joint_names=[]), 'names no joints'),
    ('manifest.json', lambda m: m['abi'].update(camera_slots=['front cam', 'side']),
     "camera slot 'front cam' gives no valid topic name"),
    ('manifest.json', lambda m: m['abi'].update(camera_sizes={'front': [0, 640]}),
     'robot.cameras.front.height: pixels, an integer >= 1, got 0'),
    ('graph.json', lambda g: _clamps(g)[0]['attrs'].update(lower=[-1.0] * 6),
     'its clamp has lower'),
    ('graph.json', lambda g: g['nodes'].append(_clamps(g)[0]), '2 clamp nodes'),
    ('graph.json', lambda g: _clamps(g)[0]['attrs'].update(upper=LOWER),
     'must be below upper'),
])
def test_what_cannot_be_simulated_is_refused_with_the_reason(copy, name, change, reason):
    root = copy(name, change)
    with pytest.raises(ValueError, match='no robot section') as error:
        robot_of_artifact(root)
    assert reason in str(error.value)


def test_a_folder_that_is_no_artifact(tmp_path):
    with pytest.raises(FileNotFoundError, match='no manifest.json'):
        robot_of_artifact(str(tmp_path))
