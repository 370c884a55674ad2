"""Node, Graph and OpGraph: the stage-level DAG with optional op-level subgraphs.

Values are named (`<node>.<port>`, or the input's name) and typed once in `Graph.values`; nodes
list the names they consume and produce, so edges are derived, never stored twice. State that a
stateful node carries from one tick to the next is a value the node both reads and writes
(`Node.state`), drawn as a self-loop edge with lifetime `episode`; it does not count for
topological order.

A node's content hash covers what decides its behaviour: op, kind, attrs, the types of its inputs,
outputs and state, and the hashes of the weights it owns. It does not cover its neighbours, so a
change in one stage changes exactly that stage's hash (the artifact diff is built on this).
"""

from collections import Counter
from dataclasses import dataclass, field
import hashlib
import json

from lamp_ros.graph.types import TensorType

SCHEMA = 'lamp.graph/1'
KINDS = ('host', 'preprocess', 'model', 'postprocess', 'stateful')
INPUT, OUTPUT = '@input', '@output'
# The only keys `Node.meta` may hold (saved in JSON); anything else is refused by lint().
META_KEYS = ('call_site', 'op_counts', 'passes')


def canonical_json(obj) -> str:
    """Deterministic JSON used for hashing (sorted keys, no whitespace)."""
    return json.dumps(obj, sort_keys=True, separators=(',', ':'), allow_nan=False)


@dataclass(frozen=True)
class OpGraph:
    """Op-level view of a model stage from torch.export: one entry per ATen call."""

    ops: tuple  # of dicts: name, target, inputs, dtype, shape
    inputs: tuple
    outputs: tuple

    @property
    def op_counts(self) -> dict:
        return dict(sorted(Counter(op['target'] for op in self.ops).items()))

    def to_dict(self) -> dict:
        return {'inputs': list(self.inputs), 'outputs': list(self.outputs),
                'ops': [dict(op) for op in self.ops]}

    @classmethod
    def from_dict(cls, d: dict) -> 'OpGraph':
        return cls(ops=tuple(d['ops']), inputs=tuple(d['inputs']), outputs=tuple(d['outputs']))


@dataclass(frozen=True)
class Node:
    """One pipeline stage."""

    id: str
    op: str
    kind: str
    inputs: tuple = ()
    outputs: tuple = ()
    state: tuple = ()
    ports: tuple = ()  # parameter path of each input (`images.base`, `chunk`), for binding
    attrs: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)  # tensor name -> {shape, dtype, sha256}
    source: str = ''
    subgraph: OpGraph | None = None
    meta: dict = field(default_factory=dict)

    def content_hash(self, values: dict) -> str:
        body = {
            'op': self.op, 'kind': self.kind, 'attrs': self.attrs, 'ports': list(self.ports),
            'inputs': [values[v].to_dict() for v in self.inputs],
            'outputs': [values[v].to_dict() for v in self.outputs],
            'state': [values[v].to_dict() for v in self.state],
            'weights': {k: w['sha256'] for k, w in sorted(self.weights.items())},
        }
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()[:16]

    def to_dict(self, values: dict) -> dict:
        return {
            'id': self.id, 'op': self.op, 'kind': self.kind, 'hash': self.content_hash(values),
            'inputs': list(self.inputs), 'ports': list(self.ports),
            'outputs': list(self.outputs), 'state': list(self.state), 'attrs': self.attrs,
            'weights': self.weights,
            'source': self.source, 'meta': self.meta,
            'subgraph': self.subgraph.to_dict() if self.subgraph else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> 'Node':
        return cls(id=d['id'], op=d['op'], kind=d['kind'], inputs=tuple(d['inputs']),
                   ports=tuple(d['ports']), outputs=tuple(d['outputs']),
                   state=tuple(d['state']), attrs=d['attrs'], weights=d['weights'],
                   source=d['source'], meta=d['meta'],
                   subgraph=OpGraph.from_dict(d['subgraph']) if d['subgraph'] else None)


@dataclass(frozen=True)
class Edge:
    """Derived: `value` flows from `src` to `dst` (a node id, `@input` or `@output`)."""

    src: str
    dst: str
    value: str
    type: TensorType

    def to_dict(self) -> dict:
        return {'src': self.src, 'dst': self.dst, 'value': self.value,
                'type': self.type.to_dict()}


@dataclass(frozen=True)
class Graph:
    """Nodes in topological order, every value typed, named graph inputs and outputs."""

    nodes: tuple
    values: dict
    inputs: tuple
    outputs: tuple
    name: str = ''

    def node(self, node_id: str) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f'graph: no node {node_id!r}; nodes: {[n.id for n in self.nodes]}')

    def producers(self) -> dict:
        """value name -> producing node id (`@input` for graph inputs)."""
        prod = {v: INPUT for v in self.inputs}
        for n in self.nodes:
            prod.update({v: n.id for v in n.outputs})
        return prod

    @property
    def edges(self) -> tuple:
        prod = self.producers()
        edges = []
        for n in self.nodes:
            edges += [Edge(prod.get(v, '?'), n.id, v, self.values[v]) for v in n.inputs]
            edges += [Edge(n.id, n.id, v, self.values[v]) for v in n.state]
        edges += [Edge(prod.get(v, '?'), OUTPUT, v, self.values[v]) for v in self.outputs]
        return tuple(edges)

    def hashes(self) -> dict:
        return {n.id: n.content_hash(self.values) for n in self.nodes}

    def lint(self) -> 'Graph':
        """Check names, types, order and ownership; errors carry the printed graph."""
        problems = []
        seen_nodes, available = set(), set(self.inputs)
        for n in self.nodes:
            if n.id in seen_nodes:
                problems.append(f'duplicate node id {n.id!r}')
            seen_nodes.add(n.id)
            if n.kind not in KINDS:
                problems.append(f'{n.id}: kind {n.kind!r} not in {KINDS}')
            for v in n.inputs:
                if v not in available:
                    problems.append(f'{n.id}: input {v!r} is not produced before this node')
            for v in (*n.inputs, *n.outputs, *n.state):
                if v not in self.values:
                    problems.append(f'{n.id}: value {v!r} has no type')
            for v in n.state:
                if self.values.get(v) and self.values[v].lifetime != 'episode':
                    problems.append(f'{n.id}: state {v!r} must have lifetime episode')
            for v in n.outputs:
                if v in available:
                    problems.append(f'{n.id}: output {v!r} is produced twice')
                available.add(v)
            unknown = set(n.meta) - set(META_KEYS)
            if unknown:
                problems.append(f'{n.id}: undocumented meta keys {sorted(unknown)}')
        for v in self.outputs:
            if v not in available:
                problems.append(f'graph output {v!r} is never produced')
        if problems:
            raise ValueError('graph lint failed:\n  ' + '\n  '.join(problems) + '\n' + str(self))
        return self

    def to_dict(self) -> dict:
        return {
            'schema': SCHEMA, 'name': self.name,
            'inputs': list(self.inputs), 'outputs': list(self.outputs),
            'values': {k: t.to_dict() for k, t in self.values.items()},
            'nodes': [n.to_dict(self.values) for n in self.nodes],
            'edges': [e.to_dict() for e in self.edges],
        }

    @classmethod
    def from_dict(cls, d: dict) -> 'Graph':
        if d.get('schema') != SCHEMA:
            raise ValueError(f'graph: schema {d.get("schema")!r}, expected {SCHEMA!r}')
        graph = cls(nodes=tuple(Node.from_dict(n) for n in d['nodes']),
                    values={k: TensorType.from_dict(t) for k, t in d['values'].items()},
                    inputs=tuple(d['inputs']), outputs=tuple(d['outputs']), name=d['name'])
        for n, saved in zip(graph.nodes, d['nodes']):
            if saved.get('hash') and saved['hash'] != n.content_hash(graph.values):
                raise ValueError(f'graph: node {n.id!r} does not match its saved hash')
        return graph

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> 'Graph':
        return cls.from_dict(json.loads(text))

    def __str__(self) -> str:
        """One fx-style line per node: `%id : types = op[kind](inputs) {attrs}`."""
        lines = [f'graph {self.name}(' + ', '.join(
            f'%{v}: {self.values[v]}' for v in self.inputs) + '):']
        for n in self.nodes:
            outs = ', '.join(f'{v.rsplit(".", 1)[-1]}: {self.values[v]}' for v in n.outputs)
            args = ', '.join(f'%{v}' for v in n.inputs)
            state = f' state=({", ".join(n.state)})' if n.state else ''
            attrs = ', '.join(f'{k}={_short(v)}' for k, v in sorted(n.attrs.items()))
            sub = f' [{len(n.subgraph.ops)} ops]' if n.subgraph else ''
            lines.append(f'  %{n.id} : ({outs}) = {n.op}[{n.kind}]({args}){state}'
                         f'{" {" + attrs + "}" if attrs else ""}{sub}')
        lines.append('  return (' + ', '.join(f'%{v}' for v in self.outputs) + ')')
        return '\n'.join(lines)


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + '...'
