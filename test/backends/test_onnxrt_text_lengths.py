"""ONNX Runtime groups at several prompt lengths (backends/text_lengths.py, backends/onnxrt.py):
pi05_tiny's artifact, built by the compiler with `fusion.text_lengths: [48, 64]`, against the
same spec built without them, through real ONNX Runtime sessions."""

import numpy as np
import pytest

from bench.tiny_cpu import PROMPTS as BENCH_PROMPTS
from lamp_ros.backends import text_lengths
from lamp_ros.backends.text_lengths import TextAxis
from lamp_ros.ops.normalize import NormStats
from lamp_ros.policies.pi05.example import example_observation
from lamp_ros.runtime import Runtime
from lamp_ros.policies.pi05.assets import norm_stats_path

# pi05_tiny's prompt is the task plus the discretised state: 42 tokens for one word
PROMPTS = dict(zip((48, 64, 96), BENCH_PROMPTS.values()))


@pytest.fixture
def one_length(tiny_variant):
    """pi05_tiny built without prompt lengths: its ONNX group runs all 96 tokens."""
    return tiny_variant('one_length')


def _ort(runtime):
    (runner,) = [r for g, r in runtime.inference_runners if g.backend == 'onnxruntime']
    return runner


def _chunk(runtime, prompt):
    runtime.reset()
    captured = {}
    observation = example_observation(NormStats.load(norm_stats_path()), seed=3, prompt=prompt)
    runtime.run(runtime.feeds(observation, 0.0), capture=captured)
    return captured['denoise.actions'].copy(), captured['tokenize.token_mask']


def test_the_build_records_and_checks_the_lengths(tiny_artifact):
    runtime = Runtime.load(tiny_artifact)
    (group,) = [g for g, _ in runtime.inference_runners if g.backend == 'onnxruntime']
    assert text_lengths.captured_lengths(group.build) == [48, 64, 96]
    # the build ran the session at 48 and 64 against 96 on the example with its tail masked
    check = group.build['text_check']
    assert set(check) == {'48', '64'}
    assert all(0 <= e <= text_lengths.CHECK_TOLERANCE for e in check.values())
    # one static export per length, each its own session on the same weights
    assert group.build['text_onnx'] == {'48': 'groups/g03_onnxruntime/model.text48.onnx',
                                        '64': 'groups/g03_onnxruntime/model.text64.onnx'}
    runner = _ort(runtime)
    assert sorted(runner.sessions) == [48, 64, 96] and runner.sessions[96] is runner.session
    assert [i.shape for i in runner.sessions[48].get_inputs() if i.name.startswith('tokenize')] \
        == [[1, 48], [1, 48]]


def test_a_plan_missing_a_lengths_file_is_refused(tiny_artifact):
    from dataclasses import replace

    from lamp_ros.backends.onnxrt import OrtRunner
    runtime = Runtime.load(tiny_artifact)
    (group,) = [g for g, _ in runtime.inference_runners if g.backend == 'onnxruntime']
    build = {**group.build, 'text_onnx': {'64': group.build['text_onnx']['64']}}
    with pytest.raises(ValueError, match=r'g03_onnxruntime: ONNX files for prompt lengths '
                                         r'\[64, 96\], the group runs at \[48, 64, 96\]'):
        OrtRunner(replace(group, build=build), tiny_artifact, 'cpu')


def test_each_prompt_runs_at_its_length_with_the_full_lengths_actions(tiny_artifact, one_length):
    """Three prompts, three lengths; the actions equal those of the artifact that runs every
    token to float32 rounding (the padding adds nothing)."""
    short, full = Runtime.load(tiny_artifact), Runtime.load(one_length)
    assert short.profile()['text_lengths'] == {}  # nothing ran yet
    for length, prompt in PROMPTS.items():
        got, mask = _chunk(short, prompt)
        assert _ort(short).last_text_length == length, prompt
        assert short.profile()['text_lengths'] == {'g03_onnxruntime': length}
        assert _ort(short).text.length_for(mask) == length
        want, _ = _chunk(full, prompt)
        assert _ort(full).text is None and full.profile()['text_lengths'] == {}
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 1e-5 * scale, prompt


def test_a_short_prompt_still_writes_into_the_arena(tiny_artifact):
    """The cut token inputs go through the same IOBinding run: the actions land in the planned
    view, at the short length."""
    runtime = Runtime.load(tiny_artifact)
    actions, _ = _chunk(runtime, PROMPTS[48])
    assert _ort(runtime).last_text_length == 48
    view = runtime.arena.view('denoise.actions')
    assert np.shares_memory(view, runtime.arena.buffers['cpu.inference'])
    np.testing.assert_array_equal(view, actions)


def test_a_group_whose_outputs_follow_the_prompt_is_refused(tiny_variant):
    """With the prefix in a group of its own, its KV cache is as long as the prompt: the build's
    check at each length refuses the group, naming the outputs and their shapes."""
    with pytest.raises(ValueError, match=r"fusion.text_lengths: the outputs .*'prefix\.k_cache': "
                                         r"\[2, 1, '240 at 48 tokens, 288 at 96', 1, 32\].* "
                                         r"change shape with the prompt length"):
        tiny_variant('split_prefix')


def _group(outputs=('actions',)):
    from lamp_ros.artifact.plan import GroupSpec
    return GroupSpec('g', 'onnxruntime', 'fp32', 'cpu', ('model',), ('ids', 'mask'), outputs)


def test_an_export_that_baked_the_full_length_is_caught():
    """check_lengths on a `run` whose outputs depend on the length it is given (as an export with
    the full length baked into a shape would): refused, naming the length."""
    axis = TextAxis(inputs=('ids', 'mask'), mask='mask', lengths=(48, 64, 96))
    mask = np.zeros((1, 96), bool)
    mask[0, :40] = True
    example = {'ids': np.zeros((1, 96), np.int64), 'mask': mask}

    def honest(values):
        return [np.array([float(values[1].sum())])]  # reads only the valid tokens

    def baked(values):
        return [np.array([float(values[0].shape[1])])]
    assert text_lengths.check_lengths(_group(), axis, example, honest) == {48: 0.0, 64: 0.0}
    with pytest.raises(ValueError, match='g: text length 48: .* not compute what the full one'):
        text_lengths.check_lengths(_group(), axis, example, baked)


def test_output_shapes_that_vary_are_named():
    text_lengths.refuse_length_dependent_outputs('g', {'actions': [1, 50, 32]})
    with pytest.raises(ValueError, match=r"g: fusion.text_lengths: the outputs \{'kv': \[2, 1, "
                                         r"'text', 64\]\}"):
        text_lengths.refuse_length_dependent_outputs('g', {'kv': [2, 1, 'text', 64],
                                                           'actions': [1, 50, 32]})


def test_the_cuda_programs_outputs_do_not_follow_the_prompt(text_program):
    """The cuda backend's check on its torch.export program (on the CPU): the actions' shape is
    static although the text inputs are dynamic."""
    group, exported, _, _ = text_program
    shapes = text_lengths.program_output_shapes(exported)
    assert shapes == [[1, 50, 32]]
    text_lengths.refuse_length_dependent_outputs(group.name, dict(zip(group.outputs, shapes)))


def test_lamp_diff_shows_the_lengths(tiny_artifact, one_length, capsys):
    """`lamp diff` between the builds with and without fusion.text_lengths: the ONNX group's
    lengths in the plan, and an ONNX file for each shorter length beside the full one, which
    stays the same file."""
    from lamp_ros.whitebox.diff import diff_artifacts
    from lamp_ros.whitebox.diff_report import run_diff
    report = diff_artifacts(one_length, tiny_artifact)
    assert report['plan_changed'] == {
        'groups_changed': {'g03_onnxruntime': {'text_lengths': [[], [48, 64, 96]]}}}
    assert report['files']['added'] == ['groups/g03_onnxruntime/model.text48.onnx',
                                        'groups/g03_onnxruntime/model.text64.onnx']
    assert report['files']['changed'] == ['plan.json', 'spec.json']
    run_diff(one_length, tiny_artifact)
    out = capsys.readouterr().out
    assert '~ group g03_onnxruntime: {"text_lengths": [[], [48, 64, 96]]}' in out


def test_lamp_inspect_shows_the_lengths_and_their_check(tiny_artifact):
    from rich.console import Console

    from lamp_ros.whitebox.inspect import inspect_artifact, print_inspect
    report = inspect_artifact(tiny_artifact)
    (group,) = [g for g in report['groups'] if g['backend'] == 'onnxruntime']
    assert group['text_lengths'] == [48, 64, 96] and set(group['text_check']) == {'48', '64'}
    console = Console(width=400, record=True)
    print_inspect(report, console)
    assert ('vision, prefix, denoise; prompt lengths 48, 64, 96, each checked against the '
            'full one: max rel 0') in console.export_text()
