"""The cuda group's program in two phases (backends/cuda/graph_phases.py), on the CPU.

The program is the real one (conftest.py: pi05_tiny_cuda's cuda group, exported, saved and
loaded). What needs a GPU, the two captured graphs and their shared memory pool, is not here
(the cuda builds on the GPU, scripts/device/full_gpu.sh); what is here: where the program
splits and why it would not, and that running it in two phases computes what the program
computes, also when the late inputs are written only between the phases, as the graphs' copies
write them.
"""

import torch

from lamp_ros.backends.cuda import graph_phases, stage_streams


def _pixels(group):
    return [group.inputs.index('stack_cameras.pixels')]


def _equal(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_the_program_splits_after_the_vision_stage(program):
    group, exported, _ = program
    module = exported.module()
    split = graph_phases.split(module.graph, 'vision', _pixels(group))
    assert split is not None
    assert split.early == tuple(_pixels(group)) and len(split.late) == len(group.inputs) - 1
    nodes = {n.name: n for n in module.graph.nodes}
    assert stage_streams.node_stage(nodes[split.first_node]) == 'prefix'
    vision_ops = sum(1 for n in module.graph.nodes if n.op == 'call_function'
                     and stage_streams.node_stage(n) == 'vision')
    assert split.first_ops == vision_ops and split.second_ops > vision_ops
    summary = split.summary(group.inputs)
    assert summary['early_inputs'] == ['stack_cameras.pixels']
    assert 'sample_noise.noise' in summary['late_inputs']


def test_no_split_where_the_first_phase_would_read_a_late_input(program):
    group, exported, _ = program
    graph = exported.module().graph
    assert graph_phases.split(graph, 'vision', []) is None       # vision reads the pixels
    assert graph_phases.split(graph, 'prefix', _pixels(group)) is None  # not the first stage
    everything = list(range(len(group.inputs)))
    assert graph_phases.split(graph, 'vision', everything).late == ()  # nothing left to wait
    vision_op = next(n.name for n in graph.nodes if n.op == 'call_function'
                     and stage_streams.node_stage(n) == 'vision')
    # another stream waiting for a first-phase operator: its event would be in the other graph
    assert graph_phases.split(graph, 'vision', _pixels(group), signalled={vision_op}) is None


def test_the_side_stream_waits_for_nothing_of_the_first_stage(program):
    group, exported, _ = program
    module = exported.module()
    plan = stage_streams.prepare(module, group.side_stages)
    assert graph_phases.split(module.graph, 'vision', _pixels(group), plan.signalled)


def _two_phases(module, split, args, streams=None):
    """Phase 1 with the late inputs zero, written in place before phase 2 (the graphs' way)."""
    static = [a.clone() for a in args]
    for i in split.late:
        static[i].zero_()
    run = graph_phases.PhasedRun(module, split, streams)
    with torch.no_grad():
        run.first(*static)
        for i in split.late:
            static[i].copy_(args[i])
        return run.second()


def test_two_phases_compute_what_the_program_computes(program):
    group, exported, args = program
    module = exported.module()
    split = graph_phases.split(module.graph, 'vision', _pixels(group))
    with torch.no_grad():
        expected = module(*args)
    assert _equal(_two_phases(module, split, args), expected)


def test_two_phases_on_the_stream_schedule(program):
    """As the runner uses them with side stages: after the stream rewrite, through the
    StreamInterpreter (on the CPU it runs without streams; fork and join are no-ops)."""
    group, exported, args = program
    module = exported.module()
    plan = stage_streams.prepare(module, group.side_stages)
    split = graph_phases.split(module.graph, 'vision', _pixels(group))
    interpreter = stage_streams.StreamInterpreter(module, plan)
    with torch.no_grad():
        expected = exported.module()(*args)
    assert _equal(_two_phases(module, split, args, interpreter), expected)
    assert _equal(_two_phases(module, split, args, interpreter), expected)  # and again


def test_phase_one_keeps_only_what_phase_two_reads(program):
    """Values are freed after their last use, as torch.fx's Interpreter.run frees them: across
    the split only the values phase 2 reads stay alive (in the graphs, their memory)."""
    group, exported, args = program
    module = exported.module()
    split = graph_phases.split(module.graph, 'vision', _pixels(group))
    run = graph_phases.PhasedRun(module, split)
    with torch.no_grad():
        run.first(*args)
    second = set(run.phases[1])
    kept = [n for n in run.interpreter.env if n.users]
    assert kept and all(any(u in second for u in n.users) for n in kept)
    made = [n for n in kept if n.op == 'call_function']
    assert made and all(stage_streams.node_stage(n) == 'vision' for n in made)
