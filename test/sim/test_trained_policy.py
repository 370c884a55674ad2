"""The shipped demo policy (config/specs/pi05_tiny.yaml, trained by scripts/train_demo_policy.py)
does the simulator's task in closed loop through its compiled artifact, and the evaluation
notices a pipeline broken on purpose: the same artifact fed BGR instead of RGB images, or its
cameras mirrored (a flipped camera driver), solves far fewer episodes. (The joint state in
reverse order does not break it: this policy reads where the arm is from the images, where
the gripper shows, and `lamp eval` finds it as good as with the right order.)"""

import json
import shutil

from lamp_ros.cli import main as lamp
from lamp_ros.runtime import Runtime
from lamp_ros.sim.evaluate import ArtifactController, evaluate

EPISODES = 8
SECONDS = 8.0


def _evaluate(artifact, transform=None) -> dict:
    runtime = Runtime.load(artifact)
    return evaluate(ArtifactController(runtime), EPISODES, SECONDS, seed=0,
                    transform=transform)


def bgr(observation):
    return {**observation, 'images': {k: v[..., ::-1].copy()
                                      for k, v in observation['images'].items()}}


def mirrored(observation):
    return {**observation, 'images': {k: v[:, ::-1].copy()
                                      for k, v in observation['images'].items()}}


def test_the_trained_policy_does_the_task_and_a_broken_pipeline_does_not(demo_artifact):
    good = _evaluate(demo_artifact)
    assert good['success_rate'] >= 0.75, good['success_rate']
    for broken in (bgr, mirrored):
        report = _evaluate(demo_artifact, broken)
        assert report['success_rate'] <= good['success_rate'] - 0.5, \
            (broken.__name__, report['success_rate'], good['success_rate'])


def test_lamp_eval_compare_says_which_artifact_got_worse(
        demo_artifact, tiny_artifact, tmp_path, capsys):
    """The trained artifact against one with random weights over the same episodes: the drop
    is a number, and --max-drop turns it into an exit status, naming both success rates with
    their 95% intervals; against a copy of its own build it passes."""
    out = tmp_path / 'compare.json'
    assert lamp(['eval', '--compare', demo_artifact, tiny_artifact, '--episodes', '4',
                 '--seconds', '6', '--out', str(out), '--max-drop', '5']) == 1
    result = json.loads(out.read_text())
    assert result['delta']['success_rate'] <= -0.5 and result['only_a_succeeded']
    printed = capsys.readouterr().out
    assert 'FAILED: B solves' in printed and '(95% CI' in printed
    copy = str(tmp_path / 'copy')
    shutil.copytree(demo_artifact, copy)
    assert lamp(['eval', '--compare', demo_artifact, copy, '--episodes', '4', '--seconds', '6',
                 '--max-drop', '5']) == 0
    assert 'B - A: success +0 points' in capsys.readouterr().out
