"""The data loop: the scripted expert drives the MuJoCo arm over ROS 2, `lamp record` records
the episode (scripts/record_demonstrations.py), and `lamp dataset` turns the bag into a LeRobot
v3.0 dataset whose frames are what the robot saw and did."""

import os
import subprocess
import sys

import numpy as np
import pytest

from lamp_ros.cli import main as lamp
from lamp_ros.dataset.reader import read_dataset
from lamp_ros.sim.world.world import load_world

pytestmark = pytest.mark.ros

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
TASK = 'pick up the red cube and put it in the bin'


def test_expert_demonstrations_become_a_lerobot_dataset(tmp_path):
    bags = tmp_path / 'bags'
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, 'scripts', 'record_demonstrations.py'),
         '--episodes', '1', '--first', '1', '--seconds', '8', '--out', str(bags)],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert '[demos] episode 1: success' in run.stdout, run.stdout + run.stderr
    out = tmp_path / 'dataset'
    assert lamp(['dataset', str(bags / 'episode_0001'), '--out', str(out), '--task', TASK]) == 0
    data = read_dataset(str(out))
    robot = load_world('viperx_pick_place').robot
    assert data.info['codebase_version'] == 'v3.0' and data.fps == 22
    assert 0.85 * 8 * 22 <= len(data) <= 1.1 * 8 * 22, len(data)     # one frame per command
    assert data.tasks == [TASK] and len(data.episodes) == 1
    assert data.info['features']['action']['names'] == list(robot.joint_names)
    state, action = data.columns['observation.state'], data.columns['action']
    lower = np.array([j.lower for j in robot.joints])
    upper = np.array([j.upper for j in robot.joints])
    assert np.all(action >= lower - 1e-6) and np.all(action <= upper + 1e-6)
    # the gripper opens, closes on the cube, and opens again in the bin
    gripper = action[:, -1]
    assert gripper.min() < 0.025 and gripper[0] > 0.05 and gripper[-1] > 0.05
    # the arm follows the expert's commands: the state a few ticks later is near the command
    assert np.abs(state[10:, :6] - action[5:-5, :6]).mean() < 0.1
    for key in data.image_keys:
        frame = data.image(len(data) - 1, key)
        assert frame.shape == (224, 224, 3) and frame.std() > 5, key
