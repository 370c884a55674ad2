"""Run side of the cuda backend: chosen stages of a group on a second stream of its CUDA graph.

Why: the group's exported program lists its stages' operators one after another, and one
captured stream makes that order a chain, so the action expert's first Euler step waits for the
whole prefix although its layer i reads only the prefix's layer-i K/V. Captured from two
streams, with an event wherever a value crosses from one to the other, the graph's edges are
the program's data dependencies instead, and the GPU can run the first Euler step's layers next
to the prefix's later ones: the expert's kernels are short and latency-bound, the prefix's are
large GEMMs.

Two things make that possible, both on the loaded program's FX graph (torch.fx only):
- `read_stacked_parts`: the prefix hands the expert its cache as `stack(ks)` and every expert
  layer reads `select(cache, 0, i)`, which joins all layers' K/V in one copy the expert waits
  for. Reading `ks[i]` directly (contiguous, as the slice was, unless only the fused attention
  reads it: it takes any stride) removes the join and the copy.
- `schedule`: every operator of a side stage goes on stream 1, everything else on stream 0
  (the capture stream); for each operator, the producers on the other stream it must wait for,
  keeping only the newest per stream (a wait for a later event covers the earlier ones).

`prepare` does both on a loaded program (the compile side for plan.json, the run side for the
capture). `StreamInterpreter` runs the graph by that schedule (torch.fx's Interpreter, one
operator at a time), on the CPU without streams (what the tests compare with the plain
program). A tensor one stream made and the other reads is marked with `record_stream`, so the
caching allocator does not hand its memory out again before the reading stream is done.
"""

from dataclasses import dataclass, field

STAGE_PREFIX = 'stages.'  # group_module's ModuleDict: nn_module_stack paths 'stages.<node>...'


def node_stage(node):
    """The group stage an FX node was traced in (from its nn_module_stack), or None."""
    for path, _ in (node.meta.get('nn_module_stack') or {}).values():
        if path.startswith(STAGE_PREFIX):
            return path[len(STAGE_PREFIX):].split('.')[0]
    return None


def _is_op(node, op) -> bool:
    return node.op == 'call_function' and node.target is op


def _reads_any_stride(node) -> bool:
    """An operator that reads its K/V rows at whatever token stride they come (lamp's fused
    expert attention: its kernel takes the stride), so a strided part needs no copy for it."""
    import torch
    import lamp_ros.kernels.operators  # noqa: F401  (registers the lamp:: operators)
    return _is_op(node, torch.ops.lamp.mqa_attention.default)


def read_stacked_parts(graph) -> int:
    """Rewrite select(stack(parts, 0), 0, i) into parts[i] where every reader of the stack is
    such a select; returns how many stacks went. A part that is not contiguous is copied once,
    right after it is made and in its own stage, so readers see the layout the slice of the
    stack had (a copy per reader would repeat it in every Euler step); unless every reader of
    it is an operator that takes rows at any stride (`_reads_any_stride`: the expert's fused
    attention reads V where the prefix's q/k/v GEMM left it), which then needs no copy."""
    import torch
    aten = torch.ops.aten
    removed = 0
    for stack in list(graph.nodes):
        if not _is_op(stack, aten.stack.default):
            continue
        parts = stack.args[0]
        dim = stack.args[1] if len(stack.args) > 1 else stack.kwargs.get('dim', 0)
        readers = list(stack.users)
        if dim != 0 or not readers or not all(
                _is_op(r, aten.select.int) and r.args[1] == 0 and isinstance(r.args[2], int)
                for r in readers):
            continue
        by_index = {}
        for reader in readers:
            by_index.setdefault(reader.args[2] % len(parts), []).append(reader)
        for index, selects in by_index.items():
            part = parts[index]
            value = part.meta.get('val')
            strided_ok = all(_reads_any_stride(user) for s in selects for user in s.users)
            if (value is None or not value.is_contiguous()) and not strided_ok:
                with graph.inserting_after(part):
                    copy = graph.call_function(aten.clone.default, (part,),
                                               {'memory_format': torch.contiguous_format})
                copy.meta.update(part.meta)
                part = copy
            for reader in selects:
                reader.replace_all_uses_with(part)
                graph.erase_node(reader)
        graph.erase_node(stack)
        removed += 1
    return removed


@dataclass
class StreamSchedule:
    """Which stream each operator runs on, and what it waits for on the other stream."""
    side_stages: tuple
    stream_of: dict = field(default_factory=dict)     # node name -> 0 (capture) or 1 (side)
    waits: dict = field(default_factory=dict)         # node name -> producer names to wait for
    signalled: set = field(default_factory=set)       # producers some wait names
    stacks_read_as_parts: int = 0                     # read_stacked_parts' count (prepare)

    def summary(self) -> dict:
        """Plain figures for the plan and the bench: operators per stream, cross-stream waits."""
        on_side = sum(1 for s in self.stream_of.values() if s == 1)
        return {'side_stages': list(self.side_stages), 'side_ops': on_side,
                'capture_ops': len(self.stream_of) - on_side,
                'cross_waits': sum(len(w) for w in self.waits.values()),
                'stacks_read_as_parts': self.stacks_read_as_parts}


def schedule(graph, side_stages) -> StreamSchedule:
    """Stream 1 for the operators of `side_stages`, stream 0 for the rest; cross-stream waits
    pruned to the newest producer per stream (events on one stream complete in order)."""
    plan = StreamSchedule(side_stages=tuple(side_stages))
    position = {}                 # node name -> index on its stream
    counts = [0, 0]
    waited = [-1, -1]             # per stream: the newest position it waited for on the other
    for node in graph.nodes:
        if node.op != 'call_function':
            continue
        stream = 1 if node_stage(node) in plan.side_stages else 0
        newest = None
        for producer in node.all_input_nodes:
            if plan.stream_of.get(producer.name) == 1 - stream and (
                    newest is None or position[producer.name] > position[newest]):
                newest = producer.name
        if newest is not None and position[newest] > waited[stream]:
            plan.waits[node.name] = (newest,)
            plan.signalled.add(newest)
            waited[stream] = position[newest]
        plan.stream_of[node.name] = stream
        position[node.name] = counts[stream]
        counts[stream] += 1
    return plan


def prepare(module, side_stages) -> StreamSchedule:
    """Rewrite a loaded program's GraphModule in place (stacked parts read directly) and
    schedule it; a side stage with no operator in the program is refused."""
    stacks = read_stacked_parts(module.graph)
    module.recompile()
    plan = schedule(module.graph, side_stages)
    plan.stacks_read_as_parts = stacks
    if not any(s == 1 for s in plan.stream_of.values()):
        raise ValueError(f'side stages {list(side_stages)} have no operator in the program')
    return plan


class StreamInterpreter:
    """Runs an FX GraphModule by a StreamSchedule: on `streams` (two torch.cuda.Streams, the
    first the current one) with events at cross-stream edges, or without streams (CPU)."""

    def __init__(self, module, plan: StreamSchedule, streams=None):
        import torch
        from torch import fx
        self.torch, self.plan, self.streams = torch, plan, streams
        outer = self

        class _Interpreter(fx.Interpreter):
            def run_node(self, node):
                return outer._run_node(self, node)

        self.interpreter = _Interpreter(module)
        self._super_run_node = fx.Interpreter.run_node
        self.events = {}

    def __call__(self, *args):
        self.begin()
        self.fork()
        out = self.interpreter.run(*args)
        self.join()
        return out

    def begin(self) -> None:
        """Before the first operator of a run: no event of an earlier run is waited for."""
        self.events = {}

    def fork(self) -> None:
        """Before the side stream's first operator: it waits for what the capture stream did
        so far (the inputs' copies, the stages before)."""
        if self.streams is not None:
            capture, side = self.streams
            side.wait_stream(capture)

    def join(self) -> None:
        """After the last operator: a capture must end on its own stream."""
        if self.streams is not None:
            capture, side = self.streams
            capture.wait_stream(side)

    def _run_node(self, interpreter, node):
        stream_index = self.plan.stream_of.get(node.name)
        if self.streams is None or stream_index is None:
            return self._super_run_node(interpreter, node)
        torch = self.torch
        stream = self.streams[stream_index]
        for producer in self.plan.waits.get(node.name, ()):
            stream.wait_event(self.events[producer])
        for source in node.all_input_nodes:
            if self.plan.stream_of.get(source.name, stream_index) != stream_index:
                for value in _tensors(interpreter.env[source]):
                    value.record_stream(stream)
        with torch.cuda.stream(stream):
            result = self._super_run_node(interpreter, node)
        if node.name in self.plan.signalled:
            event = torch.cuda.Event()
            event.record(stream)
            self.events[node.name] = event
        return result


def _tensors(value):
    import torch
    from torch.utils._pytree import tree_leaves
    return [v for v in tree_leaves(value) if isinstance(v, torch.Tensor) and v.is_cuda]
