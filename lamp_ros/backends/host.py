"""Host backend: registered numpy/OpenCV/sentencepiece operators, run in graph order.

Nothing is compiled: the group's nodes are looked up by op name in `ops.registry` and built from
their JSON attrs (and artifact resources such as the tokenizer model). This backend is the
reference for host stages, and its run side is a loop as small as the ONNX reference
evaluator's: inputs by name, nodes in order, outputs by name.
"""

import time

import numpy as np

from lamp_ros.artifact.manifest import ArtifactError
from lamp_ros.backends.base import GroupBuild
from lamp_ros.ops.plugins import HostModuleError, import_user_modules, user_modules
from lamp_ros.ops.registry import get_host_op, HOST_OPS

NAME = 'host'
STRUCTURAL_ATTRS = ('args', 'module')


def supports(node) -> tuple:
    if node.kind == 'model':
        return False, 'model stages need a compiled backend (onnxruntime, tensorrt, cuda)'
    if node.op not in HOST_OPS:
        return False, (f'no host operator registered under {node.op!r} (a policy registers its '
                       'own with host_op: docs/own-policy.md)')
    return True, 'registered host operator'


def device_for(target: str) -> str:
    return 'cpu'


def op_attrs(node) -> dict:
    return {k: v for k, v in node.attrs.items() if k not in STRUCTURAL_ATTRS}


def compile(ctx) -> GroupBuild:
    """Check that every node builds from its attrs now, not on the robot."""
    resources = ctx.example.get('@resources', {})
    for node_id in ctx.group.nodes:
        node = ctx.graph.node(node_id)
        get_host_op(node.op).factory(op_attrs(node), resources)
    ops = {n: ctx.graph.node(n).op for n in ctx.group.nodes}
    modules = user_modules(ops.values())
    return GroupBuild(files=(), metadata={'ops': ops, **({'modules': modules} if modules else {})})


def bind(ports, values, consts) -> dict:
    """Rebuild keyword arguments from flattened port paths: images.base -> images['base']."""
    kwargs = {}
    for path, value in [*zip(ports, values), *consts.items()]:
        head, *rest = path.split('.')
        if rest:
            kwargs.setdefault(head, {})['.'.join(rest)] = value
        else:
            kwargs[head] = value
    return kwargs


class HostRunner:
    """Runs a group's host nodes; stateful ones read and write the runtime's StateStore."""

    def __init__(self, group, graph, resources: dict, state, arena=None, profiler=None):
        self.group = group
        self.arena = arena
        self.profiler = profiler
        self.steps = []
        for node_id in group.nodes:
            node = graph.node(node_id)
            op = get_host_op(node.op)
            built = op.factory(op_attrs(node), resources)
            if op.stateful:
                init_state, built = built
                state.register(node_id, init_state)
            consts = {k: v for k, v in node.attrs.get('args', {}).items()}
            self.steps.append((node, op, built, consts))
        self.inputs = tuple(group.inputs)
        self.outputs = tuple(group.outputs)

    def run(self, feeds: dict, state=None, out=None, capture=None) -> dict:
        """capture: a dict to receive a copy of every node output, internal ones included
        (first-divergence localisation compares them)."""
        env = dict(feeds)
        for node, op, fn, consts in self.steps:
            start = time.perf_counter()
            args = [env.get(v) for v in node.inputs]
            missing = [p for p, a in zip(node.ports, args)
                       if a is None and p.split('.')[0] not in op.optional]
            if missing:  # e.g. a camera that is absent this tick: its branch is skipped
                env.update({v: None for v in node.outputs})
                continue
            kwargs = bind(node.ports, args, consts)
            if op.stateful:
                outs, new_state = fn(state.get(node.id), **kwargs)
                state.set(node.id, new_state)
            else:
                outs = fn(**kwargs)
            for name, value in zip(node.outputs, outs):
                env[name] = self.arena.put(name, value) if self.arena else value
                if capture is not None and value is not None:
                    capture[name] = np.array(value)
            if self.profiler:
                self.profiler.record(f'node:{node.id}', start, time.perf_counter() - start,
                                     'node')
        return {v: env.get(v) for v in self.outputs}


def load(group, ctx):
    try:  # a policy's own operators: their modules, as built (ops/plugins.py)
        import_user_modules(group.build.get('modules', {}))
    except HostModuleError as exc:
        raise ArtifactError(f'plan.json group {group.name}: {exc}') from exc
    return HostRunner(group, ctx.graph, ctx.resources, ctx.state, ctx.arena, ctx.profiler)
