"""The scripted demonstrations the demo policy learns from (sim/demonstrations.py)."""

import numpy as np

from lamp_ros.sim.demonstrations import collect, expert_chunk
from lamp_ros.sim.task import ReachTask, SUCCESS_PX

MAX_STEP = np.array([0.15] * 6 + [0.01])
LIMITS = ([-2.8, -1.9, -2.5, -2.9, -2.1, -2.9, 0.0], [2.8, 1.8, 2.3, 2.9, 2.2, 2.9, 0.08])


def test_the_expert_chunk_moves_at_the_max_step_and_arrives_over_the_cube():
    task = ReachTask.episode(0, 3)
    q = np.array([-1.0, 0.2, 0.0, 0.3, 0.0, 0.0, 0.02])
    chunk = expert_chunk(task, 2.0, q, 50, MAX_STEP)
    steps = np.abs(np.diff(np.vstack([q, chunk]), axis=0))
    assert np.all(steps <= MAX_STEP + 1e-12)
    assert task.error_px(2.0, chunk[-1]) < 1.0             # over the cube's current place
    np.testing.assert_allclose(chunk[-1, 2:], 0.0, atol=1e-12)   # other joints home


def test_demonstrations_are_deterministic_and_stay_in_the_limits():
    a = collect(3, 7, 22.0, MAX_STEP, 50, LIMITS, seconds=4.0)
    b = collect(3, 7, 22.0, MAX_STEP, 50, LIMITS, seconds=4.0)
    assert len(a) == 3 * 88 and a.actions.shape == (len(a), 50, 7)
    for key in ('t', 'q', 'cube_x', 'actions', 'episode'):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert np.all(a.q >= np.array(LIMITS[0]) - 1e-9) and np.all(a.q <= np.array(LIMITS[1]) + 1e-9)
    assert np.abs(a.q[:, 2:6]).max() < 1.0   # the disturbance does not carry joints away
    obs = a.observation(10)
    assert obs['images']['base'].shape == (240, 320, 3) and obs['state'].shape == (7,)


def test_the_labels_solve_the_task_where_the_disturbed_arm_went():
    """Following each sample's label to its end puts the gripper over the cube."""
    demos = collect(4, 1, 22.0, MAX_STEP, 50, LIMITS, seconds=6.0)
    tasks = {e: ReachTask.episode(1, e) for e in range(4)}
    errors = [tasks[int(e)].error_px(float(t), chunk[-1])
              for t, chunk, e in zip(demos.t, demos.actions, demos.episode)]
    assert max(errors) < SUCCESS_PX / 4
