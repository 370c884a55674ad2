"""The evaluation task over ROS: the simulated arm (`lamp sim` with a task episode) and vla_node
running the trained demo artifact, as on a robot. The arm ends over the cube, as `lamp eval`
finds in-process, each chunk generated around the actions the arm executes while it is computed
(the demo's merge_mode rtc), with the delay reported on the latency topic and diagnostics. The
same for the demo's int8 precision plan (config/specs/pi05_tiny_int8.yaml): what the plan
lowered still does the task on the robot's side of DDS."""

import numpy as np
import pytest

from lamp_ros.node.vla_node import LATENCY_LAYOUT
from lamp_ros.sim.task import SUCCESS_PX

pytestmark = pytest.mark.ros

CONFIGURE, ACTIVATE = 1, 3
RUN_S = 6.0   # of the simulator's clock after the first command


@pytest.mark.parametrize('artifact', ['demo_artifact', 'int8_artifact'])
def test_the_trained_policy_brings_the_gripper_over_the_cube_over_ros(
        artifact, request, make_harness):
    h = make_harness(request.getfixturevalue(artifact),
                     sim_params={'task_seed': 0, 'task_episode': 2}, execution='async')
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert h.wait_for(lambda: h.sim.commands > 0, 60), h.log()
    start = h.sim.errors[-1][0]
    assert h.wait_for(lambda: h.sim.errors[-1][0] >= start + RUN_S, 60), h.log()
    t = np.array([e[0] for e in h.sim.errors])
    error = np.array([e[1] for e in h.sim.errors])
    assert error[t <= start + 0.05].max() > SUCCESS_PX   # it starts away from the cube ...
    last = error[t >= t[-1] - 1.0]
    assert last.max() <= SUCCESS_PX, (last.max(), error[::25].round(1))   # ... and ends over it
    inferred, delay = LATENCY_LAYOUT.index('inferred'), LATENCY_LAYOUT.index('rtc_delay')
    delays = [m.data[delay] for m in list(h.latency) if m.data[inferred] == 1.0]
    assert delays and all(np.isfinite(d) and 0 <= d <= 50 for d in delays), delays
    assert max(delays) >= 1, delays   # async: the chunk lands ticks later, its delay > 0
    assert h.wait_for(lambda: h.last_status() is not None and any(
        v.key == 'rtc_delay_ticks' and v.value.isdigit() for v in h.last_status().values), 30)
