"""Run side of the cuda backend: a group's program in two phases, its first stage apart.

Why: a control tick makes the group's inputs on the host one after another (the camera images,
the tokenised prompt, the flow noise), and one CUDA graph over the whole group can only start
once the last of them is written. The group's first stage (the vision encoder) reads only its own
inputs (the pixels), so the GPU can run it while the host still tokenises and samples: the
runner captures two graphs, the first stage alone, then the rest, and the runtime launches the
first as soon as its inputs are made (runtime/schedule.py). The GPU runs the same operators in
the same order on the same stream; only the host's wait moves.

`split` finds the phase boundary on a loaded program's FX graph: the first operator that is not
the first stage's. Every operator before it must be the first stage's and read no input but its
own (else there is no split). `PhasedRun` runs the graph in those two calls, one operator at a
time (torch.fx's Interpreter, values freed after their last use as its `run` does), through a
StreamInterpreter when the group has side stages (their streams fork in the second phase: the
side stages read nothing the first stage makes, so their stream waits only for the second
graph's input copies and what the capture stream does after them).
"""

from dataclasses import dataclass

from lamp_ros.backends.cuda.stage_streams import node_stage

CHECK_MODULES = ('_guards_fn',)  # torch.export's input-shape checks: host-side, read every input


@dataclass(frozen=True)
class PhaseSplit:
    """Where the program splits: the first stage's inputs (positions among the group's inputs)
    go to the GPU in the first phase, the others in the second, which begins at `first_node`."""
    stage: str
    early: tuple
    late: tuple
    first_node: str
    first_ops: int
    second_ops: int

    def summary(self, names) -> dict:
        """Plain data for the bench (the runner's `phases`): which inputs each phase copies,
        how many operators each runs."""
        return {'first_stage': self.stage, 'early_inputs': [names[i] for i in self.early],
                'late_inputs': [names[i] for i in self.late], 'first_ops': self.first_ops,
                'second_ops': self.second_ops}


def _is_check(node) -> bool:
    return node.op == 'call_module' and node.target in CHECK_MODULES


def defer_size_reads(graph) -> int:
    """Move every symbolic size read (`aten.sym_size`, which a program exported with a dynamic
    dimension reads from its inputs right after them) to just before its first user; returns
    how many moved. Why: the first phase runs every operator before the split, so a size read
    of a text input there would fix the length the second phase sees (backends/text_lengths.py:
    the second phase is captured once for each prompt length), and would end the first stage
    before its first operator (the read belongs to no stage)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    moved = 0
    for node in list(graph.nodes):
        if node.op != 'call_function' or 'sym_size' not in str(node.target) or not node.users:
            continue
        first_user = min(node.users, key=order.__getitem__)
        if order[first_user] > order[node] + 1:
            first_user.prepend(node)
            moved += 1
    return moved


def split(graph, stage: str, stage_inputs, signalled=()) -> PhaseSplit | None:
    """The phase boundary of a program whose first operators are `stage`'s, or None.

    stage_inputs: positions (among the program's inputs) of the values `stage` reads.
    signalled: operators another stream waits for (StreamSchedule.signalled); an event
    recorded in the first graph cannot be waited for in the second. None when the program does
    not begin with that stage, when one of its operators reads another input (a value the host
    makes later) or is signalled, or when nothing follows it."""
    placeholders = [n for n in graph.nodes if n.op == 'placeholder']
    position = {p: i for i, p in enumerate(placeholders)}
    early = set(stage_inputs)
    allowed = early | {-1}  # the stage's own inputs, and values that are not inputs
    first_ops, boundary = 0, None
    for node in graph.nodes:
        if node.op in ('placeholder', 'get_attr') or _is_check(node):
            continue
        if node.op == 'output' or node_stage(node) != stage:
            boundary = node
            break
        if any(position.get(source, -1) not in allowed for source in node.all_input_nodes):
            return None  # this stage reads an input it was not given
        if node.name in signalled:
            return None
        first_ops += 1
    if boundary is None or boundary.op == 'output' or first_ops == 0:
        return None
    ops = sum(1 for n in graph.nodes
              if n.op not in ('placeholder', 'get_attr', 'output') and not _is_check(n))
    return PhaseSplit(stage=stage, early=tuple(sorted(early)),
                      late=tuple(i for i in range(len(placeholders)) if i not in early),
                      first_node=boundary.name, first_ops=first_ops,
                      second_ops=ops - first_ops)


class PhasedRun:
    """A GraphModule run in two calls: `first(*inputs)` up to the split, `second()` the rest
    (returns the program's outputs). `streams`: the group's StreamInterpreter, or None.

    `second` can run more than once after one `first` (the runner captures it for each prompt
    length): each run starts from the values the first phase left, with `inputs` (position ->
    value) replacing those inputs for the second phase."""

    def __init__(self, module, phase_split: PhaseSplit, streams=None):
        from torch import fx
        self.streams = streams
        self.interpreter = streams.interpreter if streams is not None else fx.Interpreter(module)
        nodes = list(self.interpreter.graph.nodes)
        names = [n.name for n in nodes]
        at = names.index(phase_split.first_node)
        self.phases = (nodes[:at], nodes[at:])
        self.placeholders = [n for n in nodes if n.op == 'placeholder']
        self.after_first = None  # the values the first phase left (what `second` starts from)

    def first(self, *inputs) -> None:
        it = self.interpreter
        if self.streams is not None:
            self.streams.begin()
        it.env = {}
        it.args_iter = iter(it.graph.process_inputs(*inputs))
        self._run(self.phases[0])
        self.after_first = dict(it.env)

    def second(self, inputs=None):
        it = self.interpreter
        if self.after_first is None:
            raise RuntimeError('PhasedRun.second before first')
        it.env = dict(self.after_first)
        for position, value in (inputs or {}).items():
            it.env[self.placeholders[position]] = value
        if self.streams is not None:
            self.streams.fork()
        out = self._run(self.phases[1])
        if self.streams is not None:
            self.streams.join()
        return self.interpreter.graph.process_outputs(out)

    def _run(self, nodes):
        it = self.interpreter
        for node in nodes:
            it.env[node] = it.run_node(node)
            if it.garbage_collect_values:
                for dead in it.user_to_last_uses.get(node, []):
                    del it.env[dead]
            if node.op == 'output':
                return it.env[node]
        return None
