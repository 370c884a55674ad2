"""Calibration observations from a real rosbag2 recording (regress/calibration_set.py and
`lamp calibration-set`): the regression bag of the demo, decoded as the node decodes it, read
back by the precision plan's npz reader."""

import numpy as np
import pytest

from lamp_ros.cli import main
from lamp_ros.compiler.precision_plan import read_npz_observation
from lamp_ros.regress.bag import BagError
from lamp_ros.regress.calibration_set import bag_observations
from lamp_ros.runtime import Runtime

BAG = 'test/data/pi05_tiny_sim'
JOINTS = [f'joint{i}' for i in range(1, 7)] + ['gripper']
SLOTS = ('base', 'left_wrist', 'right_wrist')


def test_observations_span_the_bag_and_run_through_the_artifact(demo_artifact, tmp_path):
    out = tmp_path / 'calibration'
    assert main(['calibration-set', BAG, '--artifact', demo_artifact, '--out', str(out),
                 '--samples', '5']) == 0
    files = sorted(out.glob('*.npz'))
    assert len(files) == 5
    observations = [read_npz_observation(str(f)) for f in files]
    for obs in observations:
        assert sorted(obs['images']) == sorted(SLOTS)
        assert all(img.dtype == np.uint8 and img.shape[2] == 3 for img in obs['images'].values())
        assert obs['state'].shape == (7,) and obs['prompt']
    # evenly spread: the arm moves during the recording, so the states differ
    assert not np.allclose(observations[0]['state'], observations[-1]['state'])
    runtime = Runtime.load(demo_artifact)
    chunk = runtime.infer(observations[2])
    assert np.all(np.isfinite(chunk))


def test_joint_order_follows_the_artifact_not_the_bag():
    forward = bag_observations(BAG, SLOTS, JOINTS, None, 2)
    backward = bag_observations(BAG, SLOTS, JOINTS[::-1], None, 2)
    np.testing.assert_array_equal(forward[1]['state'], backward[1]['state'][::-1])
    assert 'prompt' not in forward[0]


def test_a_camera_the_bag_lacks_and_an_unknown_joint_are_named():
    with pytest.raises(BagError, match='bag has no camera topic'):
        bag_observations(BAG, ('base', 'gripper_cam'), JOINTS, None, 2)
    with pytest.raises(BagError, match=r"joint state lacks joints \['elbow'\]"):
        bag_observations(BAG, SLOTS, ['elbow'], None, 2)
