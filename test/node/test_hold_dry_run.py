"""What a robot engineer does before a policy drives hardware, over real DDS: ~/hold and
~/resume (std_srvs/Trigger), hold_mode empty, dry_run, and timed multi-point trajectories."""

import numpy as np
import pytest

pytestmark = pytest.mark.ros

CONFIGURE, ACTIVATE = 1, 3


def _trigger(h, name: str):
    """Call the node's Trigger service `name`; its response."""
    from std_srvs.srv import Trigger
    client = h.driver.create_client(Trigger, f'/vla_policy/{name}')
    assert client.wait_for_service(timeout_sec=30), f'/vla_policy/{name} never appeared'
    future = client.call_async(Trigger.Request())
    assert h.wait_for(future.done, 30), f'{name}: no answer'
    return future.result()


def _positions(msg) -> np.ndarray:
    return np.array(msg.points[0].positions)


def _diag_values(h) -> dict:
    return {kv.key: kv.value for kv in h.last_status().values}


def test_hold_keeps_the_robot_where_it_is_until_resume(tiny_artifact, make_harness):
    h = make_harness(tiny_artifact, execution='sync')
    assert not _trigger(h, 'hold').success          # unconfigured: nothing to hold
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert h.wait_for(lambda: len(h.commands) > 5, 60), h.log()
    answer = _trigger(h, 'hold')
    assert answer.success and 'held: position' in answer.message, answer.message
    held_from = len(h.commands)
    assert h.wait_for(lambda: len(h.commands) > held_from + 15, 30)
    # every command since the hold (after any already in flight) is the same position
    after = [_positions(m) for _, m in h.commands[held_from + 3:]]
    assert all(np.array_equal(a, after[0]) for a in after)
    sim_q = h.sim.q.copy()
    assert np.abs(after[0] - sim_q).max() < 0.05     # where the arm is
    assert h.wait_for(lambda: _diag_values(h).get('held') == 'true', 10)
    assert 'held by ~/hold' in h.last_status().message
    assert _trigger(h, 'hold').message.startswith('already held')
    answer = _trigger(h, 'resume')
    assert answer.success and 'new episode' in answer.message
    resumed_from = len(h.commands)
    assert h.wait_for(lambda: any(not np.array_equal(_positions(m), after[0])
                                  for _, m in h.commands[resumed_from:]), 60), h.log()
    assert not _trigger(h, 'resume').success       # not held any more
    log = h.log()
    assert '~/hold: held: position' in log and '~/resume: resumed: new episode' in log


def test_hold_mode_empty_sends_one_empty_trajectory(tiny_artifact, make_harness):
    h = make_harness(tiny_artifact, execution='sync', hold_mode='empty')
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert h.wait_for(lambda: len(h.commands) > 3, 60), h.log()
    assert _trigger(h, 'hold').success
    assert h.wait_for(lambda: any(not m.points for _, m in h.commands), 10)
    empty_at = next(i for i, (_, m) in enumerate(h.commands) if not m.points)
    assert h.wait_quiet(lambda: len(h.commands), 1.0, 20)
    assert len(h.commands) - empty_at <= 2          # nothing after it (one in flight at most)
    assert list(h.commands[empty_at][1].joint_names) == list(h.sim.joints)


def test_dry_run_publishes_nothing_on_the_command_topic(tiny_artifact, make_harness):
    from trajectory_msgs.msg import JointTrajectory
    h = make_harness(tiny_artifact, execution='sync', dry_run=True)
    dry = []
    h.driver.create_subscription(JointTrajectory, '/vla_policy/dry_run/joint_trajectory',
                                 lambda m: dry.append(m), 50)
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert h.wait_for(lambda: len(dry) > 10, 60), h.log()
    assert h.commands == [] and h.sim.commands == 0   # the robot never got a command
    assert h.wait_for(lambda: h.diagnostics and _diag_values(h).get('dry_run') == 'true', 10)
    assert h.last_status().message.startswith('DRY RUN (commands on ')
    assert 'DRY RUN: commands go to ~/dry_run/joint_trajectory only' in h.log()


def test_timed_trajectories_carry_the_plan_with_velocities(tiny_artifact, make_harness):
    from lamp_ros.runtime import Runtime
    runtime = Runtime.load(tiny_artifact)
    clamp = next(n.attrs for n in runtime.artifact.graph.nodes if n.op == 'clamp')
    step = np.broadcast_to(np.asarray(clamp['max_step'], float), (len(runtime.joint_names),))
    period = runtime.period
    h = make_harness(tiny_artifact, execution='sync', trajectory_points=10)
    assert h.transition(CONFIGURE) and h.transition(ACTIVATE)
    assert h.wait_for(lambda: sum(len(m.points) == 10 for _, m in h.commands) > 5, 60), h.log()
    for _, msg in [c for c in h.commands if len(c[1].points) == 10][:5]:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        assert stamp > 0                                   # the tick time, not "now"
        times = np.array([p.time_from_start.sec + p.time_from_start.nanosec * 1e-9
                          for p in msg.points])
        np.testing.assert_allclose(np.diff(times), period, atol=1e-6)
        assert times[0] > 0 and np.all(np.diff(times) > 0)
        q = np.array([p.positions for p in msg.points])
        v = np.array([p.velocities for p in msg.points])
        assert v.shape == q.shape and np.isfinite(v).all()
        np.testing.assert_allclose(v, np.gradient(q, period, axis=0), rtol=1e-9, atol=1e-9)
        assert np.all(q >= np.asarray(clamp['lower']) - 1e-9)
        assert np.all(q <= np.asarray(clamp['upper']) + 1e-9)
        assert np.all(np.abs(np.diff(q, axis=0)) <= step + 1e-9)   # the velocity limits
