"""The cuda group's program on two streams (backends/cuda/stage_streams.py), on the CPU.

The program is the real one: pi05_tiny_cuda's plan, its cuda group (vision, prefix, denoise)
with every pass and the lamp:: kernels (their CPU references), exported with torch.export as
the cuda backend does, saved and loaded. What needs a GPU, the streams and the events of the
capture, is not here (the device builds run it: scripts/device/full_gpu.sh);
what is here: the rewrite keeps every output bit for bit, the schedule lets the expert start
before the prefix ends (and would not without the rewrite), and the interpreter that runs the
schedule computes what the program computes.
"""

import pytest
import torch

from lamp_ros.backends.cuda import stage_streams

aten = torch.ops.aten


def _run(module, args):
    with torch.no_grad():
        return module(*args)


def _rewritten(program):
    _, exported, _ = program
    module = exported.module()
    stacks = stage_streams.read_stacked_parts(module.graph)
    module.graph.lint()
    module.recompile()
    return module, stacks


def test_stacked_cache_is_read_from_its_parts_bit_for_bit(program):
    _, exported, args = program
    want = _run(exported.module(), args)
    module, stacks = _rewritten(program)
    assert stacks == 2  # the prefix's K and V caches
    assert not [n for n in module.graph.nodes if n.target is aten.stack.default]
    got = _run(module, args)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # only the fused attention reads the parts, at any stride: a strided V needs no copy
    assert not _contiguous_copies(module)
    strided = [p for p in _cache_parts(module) if not p.meta['val'].is_contiguous()]
    assert strided and all(u.target is torch.ops.lamp.mqa_attention.default
                           for p in strided for u in p.users if u.op == 'call_function'
                           and stage_streams.node_stage(u) == 'denoise')


def _contiguous_copies(module) -> list:
    return [n for n in module.graph.nodes if n.target is aten.clone.default
            and n.kwargs.get('memory_format') is torch.contiguous_format]


def _cache_parts(module) -> list:
    """The prefix's K/V parts the expert's attentions read."""
    attentions = [n for n in module.graph.nodes
                  if n.target is torch.ops.lamp.mqa_attention.default]
    return list({part: None for n in attentions for part in n.args[1:3]})


def test_a_strided_part_other_readers_read_is_copied_once(program, tmp_path):
    """With the expert's attention in its library form (torch ops that were traced on the
    contiguous slice of the stack), a part that is not contiguous is copied once, where the
    prefix made it (capture stream), not once per expert layer and Euler step."""
    group, exported, args = program
    module = exported.module()
    for node in module.graph.nodes:  # the attention's readers as a library op would take them
        if node.target is torch.ops.lamp.mqa_attention.default:
            node.target = _library_attention
    module.recompile()
    want = _run(module, args)
    assert stage_streams.read_stacked_parts(module.graph) == 2
    module.graph.lint()
    module.recompile()
    copies = _contiguous_copies(module)
    assert copies and all(stage_streams.node_stage(n) == 'prefix' for n in copies)
    assert len(copies) <= 2 * 2  # at most one per part: 2 layers x (K, V) in pi05_tiny
    for a, b in zip(_run(module, args), want):
        assert torch.equal(a, b)


def _library_attention(qkv, k_prefix, v_prefix, *rest):
    """The fused attention's reference, standing in for a reader that needs the layout it
    was traced with."""
    from lamp_ros.kernels import operators as ops
    return ops.mqa_attention_reference(qkv, k_prefix, v_prefix, *rest[:5])


def _ancestors(node) -> set:
    seen, todo = set(), [node]
    while todo:
        for parent in todo.pop().all_input_nodes:
            if parent.name not in seen:
                seen.add(parent.name)
                todo.append(parent)
    return seen


def _first_attention(module):
    """The expert's first attention over the prefix cache (layer 0 of Euler step 1)."""
    return next(n for n in module.graph.nodes if n.target is torch.ops.lamp.mqa_attention.default)


def test_schedule_puts_the_expert_on_the_side_stream_and_lets_it_start_early(program):
    module, _ = _rewritten(program)
    plan = stage_streams.schedule(module.graph, ('denoise',))
    ops = [n for n in module.graph.nodes if n.op == 'call_function']
    for node in ops:
        assert plan.stream_of[node.name] == (stage_streams.node_stage(node) == 'denoise'), node
    # only the side stream waits (for the prefix's K/V, layer by layer), never the capture one
    assert all(plan.stream_of[name] == 1 for name in plan.waits)
    assert all(plan.stream_of[p] == 0 for w in plan.waits.values() for p in w)
    assert 2 <= plan.summary()['cross_waits'] <= len(ops)
    # the expert's first attention needs only part of the prefix: later layers run beside it
    capture = [n.name for n in ops if plan.stream_of[n.name] == 0]
    needed = _ancestors(_first_attention(module))
    assert capture[-1] not in needed
    assert sum(name not in needed for name in capture) >= 10
    summary = plan.summary()
    assert summary['side_ops'] + summary['capture_ops'] == len(ops)
    assert summary['side_stages'] == ['denoise']


def test_without_the_rewrite_the_expert_waits_for_the_whole_prefix(program):
    """The stack joins every layer's K/V: the expert's first attention needs all of it."""
    _, exported, _ = program
    module = exported.module()
    stacks = [n for n in module.graph.nodes if n.target is aten.stack.default]
    needed = _ancestors(_first_attention(module))
    assert len(stacks) == 2 and all(stack.name in needed for stack in stacks)
    # and so every K/V the prefix makes, its last layer's included
    assert all(part.name in needed for stack in stacks for part in stack.all_input_nodes)


def test_waits_are_pruned_to_the_newest_producer(program):
    """A wait for a later event on the capture stream covers every earlier one."""
    module, _ = _rewritten(program)
    plan = stage_streams.schedule(module.graph, ('denoise',))
    position = {name: i for i, name in enumerate(
        n.name for n in module.graph.nodes if plan.stream_of.get(n.name) == 0)}
    waited = [position[p] for n in module.graph.nodes for p in plan.waits.get(n.name, ())]
    assert waited == sorted(set(waited))  # strictly later each time
    assert all(len(w) == 1 for w in plan.waits.values())
    assert plan.signalled == {p for w in plan.waits.values() for p in w}


def test_interpreter_of_the_schedule_computes_the_program(program):
    _, exported, args = program
    want = _run(exported.module(), args)
    module, _ = _rewritten(program)
    plan = stage_streams.schedule(module.graph, ('denoise',))
    got = _run(stage_streams.StreamInterpreter(module, plan), args)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_no_side_stage_no_side_operator(program):
    module, _ = _rewritten(program)
    plan = stage_streams.schedule(module.graph, ())
    assert set(plan.stream_of.values()) == {0} and not plan.waits


def test_prepare_is_the_rewrite_and_the_schedule_and_refuses_an_empty_side(program):
    _, exported, _ = program
    plan = stage_streams.prepare(exported.module(), ('denoise',))
    module, _ = _rewritten(program)
    again = stage_streams.schedule(module.graph, ('denoise',))
    assert plan.stream_of == again.stream_of and plan.waits == again.waits
    assert plan.summary()['stacks_read_as_parts'] == 2
    with pytest.raises(ValueError, match='no operator'):
        stage_streams.prepare(exported.module(), ('tokenize',))
