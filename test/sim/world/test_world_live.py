"""`lamp sim --world`: vla_node drives the MuJoCo arm over ROS 2 exactly as it would a robot.

The node runs the world's random-weights artifact at 22 Hz while the world's physics follows
its commands in real time and MuJoCo renders the overhead and wrist cameras; the frames the
simulator published are saved beside the test's output for a look."""

import numpy as np
import pytest

pytestmark = pytest.mark.ros

CONFIGURE, ACTIVATE = 1, 3
WORLD = 'viperx_pick_place'


def test_the_node_drives_the_mujoco_arm_at_22_hz(world_random_artifact, make_harness, tmp_path):
    import cv2
    h = make_harness(world_random_artifact, sim_params={'world': WORLD})
    try:
        assert set(h.sim.camera_pubs) == {'base', 'left_wrist'}
        start = h.sim.q.copy()
        assert h.transition(CONFIGURE) and h.transition(ACTIVATE), h.log()
        assert h.wait_for(lambda: len(h.commands) > 10, 60), h.log()
        report = h.assert_rate(22.0)
        print(report)
        assert h.wait_for(lambda: h.sim.commands > 20, 30)
        names = list(h.commands[-1][1].joint_names)
        assert names == ['waist', 'shoulder', 'elbow', 'forearm_roll', 'wrist_angle',
                         'wrist_rotate', 'gripper']
        # the arm moved under physics, within its limits
        assert h.wait_for(lambda: np.abs(h.sim.q - start).max() > 0.05, 30)
        assert np.all(h.sim.q[:6] >= h.sim.lower[:6] - 0.05) and \
            np.all(h.sim.q[:6] <= h.sim.upper[:6] + 0.05)
        assert h.sim.errors and all(np.isfinite(e) for _, e in h.sim.errors)
        for slot, frame in h.sim.frames.items():
            assert frame.shape == (224, 224, 3) and frame.std() > 5, slot  # a picture
            cv2.imwrite(str(tmp_path / f'{slot}.png'), frame[:, :, ::-1])
    finally:
        log = h.stop()
    assert 'Traceback' not in log, log
