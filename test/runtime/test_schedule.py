"""The order an inference runs its groups in (runtime/schedule.py), and the runtime running it.

The two-phase runner is the cuda backend's (two CUDA graphs), which cannot exist on a CPU
machine; here a stand-in wraps the tiny artifact's ONNX Runtime group: `start` records what
it was given, `finish` runs the real session. What is checked: the order of the steps, that
the first phase gets its inputs before the other host groups run, that the commands are bit
for bit those of the plain order, and that a host group failing between start and finish
leaves the next inference whole.
"""

from dataclasses import dataclass

import numpy as np
import pytest

from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.pi05.example import example_observation
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.schedule import inference_steps
from lamp_ros.policies.pi05.assets import norm_stats_path


@dataclass
class G:
    name: str
    inputs: tuple
    outputs: tuple


class R:
    def __init__(self, inputs, early=()):
        self.inputs, self.early_inputs = inputs, early


def _plan():
    groups = [G('tok', ('state', 'prompt'), ('ids',)), G('img', ('images',), ('pixels', 'mask')),
              G('noise', (), ('noise',)), G('gpu', ('pixels', 'mask', 'ids', 'noise'), ('a',)),
              G('post', ('a',), ('chunk',))]
    runners = [R(g.inputs) for g in groups]
    runners[3] = R(groups[3].inputs, early=('pixels',))
    return list(zip(groups, runners))


def _order(steps):
    return [(s.action, s.group.name) for s in steps]


def test_the_first_phase_starts_once_its_inputs_are_made():
    assert _order(inference_steps(_plan())) == [
        ('run', 'img'), ('start', 'gpu'), ('run', 'tok'), ('run', 'noise'),
        ('finish', 'gpu'), ('run', 'post')]


def test_without_overlap_or_without_early_inputs_the_plan_order_stands():
    plan = _plan()
    plain = [('run', g.name) for g, _ in plan]
    assert _order(inference_steps(plan, overlap=False)) == plain
    plan[3] = (plan[3][0], R(plan[3][0].inputs))
    assert _order(inference_steps(plan)) == plain


def test_the_groups_an_early_input_needs_move_ahead_in_plan_order():
    plan = _plan()
    # the images now need the tokens group first (e.g. a prompt-dependent crop)
    plan[1] = (G('img', ('images', 'ids'), ('pixels', 'mask')), plan[1][1])
    assert _order(inference_steps(plan)) == [
        ('run', 'tok'), ('run', 'img'), ('start', 'gpu'), ('run', 'noise'),
        ('finish', 'gpu'), ('run', 'post')]


class TwoPhaseStandIn:
    """The cuda runner's interface over a CPU runner (see the module docstring)."""

    def __init__(self, runner, early, log):
        self.runner, self.early_inputs, self.log = runner, early, log
        self.inputs, self.outputs = runner.inputs, runner.outputs

    def start(self, feeds):
        missing = [v for v in self.early_inputs if feeds.get(v) is None]
        self.log.append(('start', missing))

    def finish(self, feeds):
        self.log.append(('finish', [v for v in self.inputs if feeds.get(v) is None]))
        return self.runner.run(feeds, None, {})

    def run(self, feeds, state=None, out=None):
        self.start(feeds)
        return self.finish(feeds)


def _two_phase_runtime(path, log):
    plain = Runtime.load(path)
    runners = {g.name: r for g, r in plain.inference_runners + plain.tick_runners}
    for group, runner in plain.inference_runners:
        if group.backend == 'onnxruntime':
            runners[group.name] = TwoPhaseStandIn(runner, ('stack_cameras.pixels',), log)
    runtime = Runtime(plain.artifact, plain.device,
                      [runners[g.name] for g in plain.artifact.plan.groups],
                      plain.state, plain.arena, plain.profiler)
    return plain, runtime


def _watch_host_groups(runtime, log):
    for group, runner in runtime.inference_runners:
        if group.backend == 'host':
            real = runner.run

            def run(*args, _real=real, _name=group.name, **kwargs):
                log.append(('host', _name))
                return _real(*args, **kwargs)
            runner.run = run


def test_runtime_starts_the_first_phase_before_the_other_host_groups(tiny_artifact):
    log = []
    plain, runtime = _two_phase_runtime(tiny_artifact, log)
    _watch_host_groups(runtime, log)
    obs = example_observation(NormStats.load(norm_stats_path()))
    runtime.reset()
    overlapped = runtime.run(runtime.feeds(obs, 0.0))['clamp.command']
    names = {n: g.name for g in runtime.artifact.plan.groups for n in g.nodes}
    images, tokens, noise = names['stack_cameras'], names['tokenize'], names['sample_noise']
    assert log.index(('host', images)) < log.index(('start', [])) \
        < log.index(('host', tokens)) < log.index(('finish', []))
    assert log.index(('start', [])) < log.index(('host', noise))
    runtime.overlap = False
    log.clear()
    runtime.reset()
    serial = runtime.run(runtime.feeds(obs, 0.0))['clamp.command']
    assert log.index(('host', tokens)) < log.index(('start', []))  # plan order: run = both
    np.testing.assert_array_equal(overlapped, serial)
    plain.reset()
    np.testing.assert_array_equal(overlapped, plain.run(plain.feeds(obs, 0.0))['clamp.command'])


def test_a_host_group_failing_after_the_start_leaves_the_next_inference_whole(tiny_artifact):
    log = []
    plain, runtime = _two_phase_runtime(tiny_artifact, log)
    obs = example_observation(NormStats.load(norm_stats_path()))
    runtime.reset()
    with pytest.raises(ValueError, match='more than max_len'):
        runtime.run(runtime.feeds({**obs, 'prompt': 'move ' * 400}, 0.0))
    assert [entry[0] for entry in log] == ['start']  # started, never finished
    runtime.reset()
    command = runtime.run(runtime.feeds(obs, 0.0))['clamp.command']
    plain.reset()
    np.testing.assert_array_equal(command, plain.run(plain.feeds(obs, 0.0))['clamp.command'])
