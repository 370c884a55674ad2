"""Your own robot: the node and the simulator follow the robot the artifact was built for
(config/robots/arm6_gripper.yaml: its driver's joint names, 640x480 JPEG on
/camera/<slot>/image_raw/compressed, no right wrist camera), and `joint_names` remaps one
artifact onto a robot whose driver names the same joints otherwise."""

import numpy as np
import pytest

pytestmark = pytest.mark.ros

CONFIGURE, ACTIVATE = 1, 3
ARM6 = ['shoulder_pan', 'shoulder_lift', 'elbow', 'wrist_1', 'wrist_2', 'wrist_3', 'gripper']
# the same arm as a UR driver and a Robotiq gripper driver name its joints
UR = ['shoulder_pan_joint', 'shoulder_lift_joint', 'elbow_joint', 'wrist_1_joint',
      'wrist_2_joint', 'wrist_3_joint', 'robotiq_85_left_knuckle_joint']


def drive(h, names):
    """Configure, activate, check 22 Hz and the commands' joint names, the arm following."""
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE), h.log()
    assert h.wait_for(lambda: len(h.commands) > 10, 60), h.log()
    h.assert_rate(22.0)
    for _, msg in h.commands[-5:]:
        assert list(msg.joint_names) == names
        assert len(msg.points[0].positions) == 7 and np.isfinite(msg.points[0].positions).all()
    assert h.wait_for(lambda: h.sim.commands > 20, 30)  # the simulated robot follows them


def test_the_node_drives_the_robot_it_was_built_for(arm6_artifact, make_harness):
    h = make_harness(arm6_artifact, sim_params={'artifact': arm6_artifact})
    try:
        assert set(h.sim.camera_pubs) == {'base', 'left_wrist'}
        drive(h, ARM6)
        # any frame size is accepted; the diagnostics say what the robot sends
        assert h.wait_for(lambda: any(
            kv.key == 'image_size.base' and kv.value == '640x480'
            for _, m in h.diagnostics[-3:] for kv in m.status[0].values), 30)
    finally:
        log = h.stop()
    assert 'Traceback' not in log, log


def test_one_artifact_two_drivers_through_joint_names(arm6_artifact, make_harness):
    h = make_harness(arm6_artifact, sim_params={'artifact': arm6_artifact, 'joint_names': UR},
                     joint_names=UR)
    try:
        drive(h, UR)
    finally:
        log = h.stop()
    assert 'Traceback' not in log, log


def test_joint_names_of_another_length_are_refused(arm6_artifact, make_harness):
    h = make_harness(arm6_artifact, sim=False, joint_names=UR[:6])
    try:
        assert not h.transition(CONFIGURE)
        assert h.wait_for(lambda: 'one distinct robot joint per joint of the artifact' in
                          h.log(), 30), h.log()
    finally:
        h.stop()
