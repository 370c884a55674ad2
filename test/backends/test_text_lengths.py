"""The cuda group at several prompt lengths (backends/text_lengths.py), on the CPU: which
inputs carry the text, which length a mask takes, and the real program of pi05_tiny_cuda
exported with the text length dynamic, run in two phases at each length as the runner captures
it. (The CUDA graphs themselves need a GPU: scripts/device/full_gpu.sh builds and runs both
specs that ask for prompt lengths on the H200.)"""

import numpy as np
import pytest
import torch

from lamp_ros.backends import text_lengths
from lamp_ros.backends.cuda import graph_phases, stage_streams
from lamp_ros.backends.text_lengths import TextAxis

AXIS = TextAxis(inputs=('tokenize.token_ids', 'tokenize.token_mask'),
                mask='tokenize.token_mask', lengths=(64, 128, 200))


def _mask(valid, full=200):
    mask = np.zeros((1, full), bool)
    mask[0, valid] = True
    return mask


@pytest.mark.parametrize('valid, length', [
    (slice(0, 52), 64),     # the bench's prompt
    (slice(0, 64), 64),     # exactly the shortest
    (slice(0, 65), 128),
    (slice(0, 200), 200),
    ([3, 150], 200),        # a valid token after a hole still counts: nothing is ever cut
    ([], 64),               # no valid token at all
])
def test_the_shortest_length_that_holds_every_valid_token(valid, length):
    assert AXIS.length_for(_mask(valid)) == length


def test_a_mask_of_another_length_is_refused_by_name():
    with pytest.raises(ValueError, match=r'tokenize.token_mask: shape \(1, 96\)'):
        AXIS.length_for(_mask(slice(0, 5), full=96))


@pytest.mark.parametrize('lengths', [(), (1, 200), (128, 64, 200), (64, 64, 200)])
def test_bad_lengths_are_refused(lengths):
    with pytest.raises(ValueError, match='lengths must be increasing'):
        TextAxis(inputs=AXIS.inputs, mask=AXIS.mask, lengths=lengths)


def test_round_trip_and_cut():
    assert TextAxis.from_dict(AXIS.to_dict()) == AXIS
    names = ('stack_cameras.pixels',) + AXIS.inputs
    values = [np.zeros((1, 3, 4, 4, 3)), np.zeros((1, 200), np.int64), _mask(slice(0, 9))]
    cut = AXIS.cut(names, values, 64)
    assert [np.shape(v) for v in cut] == [(1, 3, 4, 4, 3), (1, 64), (1, 64)]
    assert np.shares_memory(cut[1], values[1])  # views of the buffers the graph copies


def test_the_text_inputs_are_the_tokenizers_outputs(cuda_group):
    spec, graph, group, _, _, values = cuda_group
    axis = text_lengths.text_axis(graph, group, values, spec.fusion['text_lengths'])
    assert axis == TextAxis(inputs=('tokenize.token_ids', 'tokenize.token_mask'),
                            mask='tokenize.token_mask', lengths=(64, 96))
    # nothing asked, or nothing shorter than the full 96 tokens: one length, no dynamic export
    assert text_lengths.text_axis(graph, group, values, ()) is None
    assert text_lengths.text_axis(graph, group, values, (96, 128)) is None
    assert text_lengths.text_axis(graph, group, values, (32, 96)).lengths == (32, 96)


def test_the_example_prompt_takes_the_shorter_graph(cuda_group):
    """The example observation's prompt (the bench's) has 52 valid tokens of pi05_tiny's 96."""
    _, _, _, _, _, values = cuda_group
    mask = values['tokenize.token_mask']
    assert int(mask.sum()) == 52
    assert TextAxis(inputs=('tokenize.token_ids', 'tokenize.token_mask'),
                    mask='tokenize.token_mask', lengths=(64, 96)).length_for(mask) == 64


def _phased(module, group, stream_schedule=False):
    """The program prepared as the runner prepares it: size reads deferred, the stream
    rewrite, the split (on the CPU the StreamInterpreter runs without streams)."""
    moved = graph_phases.defer_size_reads(module.graph)
    module.recompile()
    first = group.inputs.index('stack_cameras.pixels')
    plan = stage_streams.prepare(module, group.side_stages)
    split = graph_phases.split(module.graph, group.nodes[0], [first], signalled=plan.signalled)
    interpreter = stage_streams.StreamInterpreter(module, plan) if stream_schedule else None
    return moved, split, graph_phases.PhasedRun(module, split, interpreter)


def test_every_length_in_two_phases_computes_the_programs_actions(text_program):
    """One first phase, then the second at each length (as the runner captures them), against
    the exported program called at that length and at the full one: the same numbers at a
    length, and the shorter length's actions equal to the full length's to float32 rounding
    (the padding adds nothing)."""
    group, exported, axis, args = text_program
    module = exported.module()
    full = module(*args)
    moved, split, run = _phased(exported.module(), group)
    assert moved >= 1  # the exported program reads the text length right after its inputs
    assert split is not None and split.stage == 'vision'
    with torch.no_grad():
        run.first(*args)
        for length in axis.lengths:
            cut = axis.cut(group.inputs, args, length)
            got = run.second({i: cut[i] for i in split.late})
            want = module(*cut)
            assert torch.equal(got[0], want[0]), length
            scale = full[0].abs().max()
            assert (got[0] - full[0]).abs().max() <= 1e-5 * scale, length


def test_a_length_too_short_for_the_valid_tokens_changes_the_actions(text_program):
    """What `length_for` protects: with 80 valid tokens, the 64-token graph would cut 16 of
    them, and that changes the actions (so the equality above can fail); it takes 96."""
    group, exported, axis, args = text_program
    args = list(args)
    mask = group.inputs.index(axis.mask)
    args[mask] = args[mask].clone()
    args[mask][:, :80] = True
    assert axis.length_for(args[mask].numpy()) == 96
    module = exported.module()
    full = module(*args)
    short = module(*axis.cut(group.inputs, args, 64))
    assert (short[0] - full[0]).abs().max() > 1e-3 * full[0].abs().max()


def test_the_second_phase_at_each_length_through_the_stream_schedule(text_program):
    """The same through the side stage's stream schedule, the runner's form for pi05_tiny_cuda
    and pi05_full; the shorter length after the full one too (the captures' order does not
    matter: each second phase starts from what the first left)."""
    group, exported, axis, args = text_program
    module = exported.module()
    _, split, run = _phased(exported.module(), group, stream_schedule=True)
    with torch.no_grad():
        run.first(*args)
        for length in (96, 64, 96):
            cut = axis.cut(group.inputs, args, length)
            assert torch.equal(run.second({i: cut[i] for i in split.late})[0], module(*cut)[0])
