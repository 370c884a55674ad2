"""vla_node drives policies that are not lamp's own pi0.5 over real DDS: act_small (two cameras
named `front` and `side`, no prompt), point_reach (one camera, the policy's own glue operator)
and a LeRobot checkpoint through `lamp import` (its cameras named as LeRobot's features, six of
the arm's joints), each with the simulated arm publishing the artifact's own camera slots. The
node takes its camera topics, joints and prompt from the artifact's declared interface."""

import numpy as np
import pytest

pytestmark = pytest.mark.ros

CONFIGURE, ACTIVATE = 1, 3


@pytest.mark.parametrize('name,cameras,joints', [
    ('act_small', ['front', 'side'], 7), ('point_reach', ['scene'], 7),
    ('lerobot_sim', ['base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb'], 6)])
def test_the_node_drives_it_at_22_hz(name, cameras, joints, request, make_harness):
    artifact = request.getfixturevalue(f'{name}_artifact')
    h = make_harness(artifact, sim_params={'cameras': cameras})
    try:
        assert h.transition(CONFIGURE) and h.transition(ACTIVATE), h.log()
        assert h.wait_for(lambda: len(h.commands) > 10, 60), h.log()
        h.assert_rate(22.0)  # on the node's own clock (RosHarness.node_rate)
        positions = np.array([p.positions for _, m in h.commands for p in m.points])
        assert positions.shape[1] == joints and np.isfinite(positions).all()
        if joints == 7:  # the simulated arm follows a command for all of its joints
            assert h.wait_for(lambda: h.sim.commands > 20, 30)
    finally:
        log = h.stop()
    assert 'Traceback' not in log, log
