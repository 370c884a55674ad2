"""Closed-loop evaluation of the simulator's task (`lamp eval`): the scripted expert solves it,
a policy with random weights does not, a controller that reads the scene wrongly fails, and
the report keeps its contract (success_rate, success_ci, episodes, mean_error, rms_jerk,
max_boundary_jump, per_episode)."""

import json
import math

import numpy as np

from lamp_ros.cli import main as lamp
from lamp_ros.sim.evaluate import (Episode, evaluate, ExpertController, smoothness,
                                   success_interval)
from lamp_ros.sim.task import ReachTask, succeeded, SUCCESS_PX

KEYS = {'success_rate', 'success_ci', 'episodes', 'mean_error', 'rms_jerk', 'max_boundary_jump',
        'per_episode'}


def test_the_expert_target_puts_the_gripper_on_its_mark():
    task = ReachTask.episode(0, 3)
    for t in (0.0, 2.5, 7.0):
        q = np.array([0.3, -0.2, 0.1, 0.4, 0.0, 0.0, 0.04])
        assert task.error_px(t, task.expert_target(t, q)) < 1e-6
    assert task.error_px(0.0, np.zeros(7)) > SUCCESS_PX  # the cube is never where it starts
    assert 0.3 - 0.04 <= task.cube_x(1.0) <= 0.7 + 0.04


def test_success_needs_the_last_second_within_the_threshold():
    assert succeeded([50.0] * 100 + [SUCCESS_PX] * 22, 22.0)
    assert not succeeded([0.0] * 100 + [SUCCESS_PX + 1] + [0.0] * 21, 22.0)


def test_the_scripted_expert_solves_it():
    report = evaluate(ExpertController(22.0, 7, 0.15), episodes=5, seconds=6.0, seed=1)
    assert KEYS <= set(report) and report['episodes'] == len(report['per_episode']) == 5
    assert report['success_ci'] == success_interval(5, 5) and report['success_ci'][1] == 1.0
    assert report['success_rate'] == 1.0 and report['mean_error'] < SUCCESS_PX


class MirroredExpert(ExpertController):
    """Reads the scene mirrored left-right (as a flipped camera would): the evaluation must
    say that it fails."""

    def __call__(self, observation, t, t_obs, task, q):
        mirrored = ReachTask(1.0 - task.cube_x0, task.phase + math.pi)
        return super().__call__(observation, t, t_obs, mirrored, q)


def test_a_controller_that_reads_the_scene_wrongly_fails():
    report = evaluate(MirroredExpert(22.0, 7, 0.15), episodes=5, seconds=6.0, seed=1)
    assert report['success_rate'] <= 0.2, report['success_rate']


def test_lamp_eval_of_random_weights(tiny_artifact, tmp_path, capsys):
    """pi05_tiny with seeded random weights does not do the task; the report is a JSON with a
    PNG beside it, the same for the same seed."""
    out = tmp_path / 'eval.json'
    assert lamp(['eval', tiny_artifact, '--episodes', '3', '--seconds', '5', '--out',
                 str(out)]) == 0
    report = json.loads(out.read_text())
    assert KEYS <= set(report) and report['success_rate'] <= 0.34
    assert (tmp_path / 'eval.png').stat().st_size > 0
    assert lamp(['eval', tiny_artifact, '--episodes', '3', '--seconds', '5', '--out',
                 str(tmp_path / 'again.json')]) == 0
    again = json.loads((tmp_path / 'again.json').read_text())
    assert again['per_episode'][0]['errors'] == report['per_episode'][0]['errors']
    assert lamp(['eval', tiny_artifact, '--expert', '--episodes', '2', '--seconds', '5']) == 0
    assert 'expert: success 100%' in capsys.readouterr().out


def test_lamp_eval_can_override_the_merge_mode(tiny_artifact, tmp_path):
    """--merge-mode runs the same episodes with another chunk merge (temporal_ensemble is the
    artifact's): the commands, and so the errors, change."""
    runs = {}
    for mode in ('temporal_ensemble', 'latest'):
        out = tmp_path / f'{mode}.json'
        assert lamp(['eval', tiny_artifact, '--episodes', '1', '--seconds', '4',
                     '--merge-mode', mode, '--out', str(out)]) == 0
        runs[mode] = json.loads(out.read_text())['per_episode'][0]['errors']
    default = tmp_path / 'default.json'
    assert lamp(['eval', tiny_artifact, '--episodes', '1', '--seconds', '4', '--out',
                 str(default)]) == 0
    assert json.loads(default.read_text())['per_episode'][0]['errors'] == \
        runs['temporal_ensemble']
    assert runs['latest'] != runs['temporal_ensemble']


def test_a_boundary_kink_is_a_change_of_step_not_speed():
    """A steady ramp jumps by its step at every boundary but has no kink; a step that changes
    at a boundary has one."""
    ramp = [np.array([0.1 * k]) for k in range(10)]
    episode = Episode(0, True, 0.0, 0.0, [0.0] * 10, ramp, [3, 6])
    assert math.isclose(smoothness(episode, 10.0)['max_boundary_jump'], 0.1)
    assert smoothness(episode, 10.0)['max_boundary_kink'] < 1e-12
    bent = ramp[:6] + [ramp[5] + 0.3 * (k + 1) for k in range(4)]
    kinked = smoothness(Episode(0, True, 0.0, 0.0, [0.0] * 10, bent, [3, 6]), 10.0)
    assert math.isclose(kinked['max_boundary_kink'], 0.2)


def test_the_success_interval_is_wilsons():
    """95% Wilson score interval: known values, inside [0, 1], never empty at 0% or 100%."""
    low, high = success_interval(95, 100)
    assert math.isclose(low, 0.8882, abs_tol=1e-4) and math.isclose(high, 0.9785, abs_tol=1e-4)
    assert success_interval(0, 20)[0] == 0.0 and 0.15 < success_interval(0, 20)[1] < 0.17
    assert success_interval(10, 10)[1] == 1.0 and success_interval(10, 10)[0] < 1.0
