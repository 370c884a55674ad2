"""The build plan (plan.json): groups in execution order with backend, precision, device,
members and the reason for each choice, the phase of every node, the coverage table."""

from dataclasses import dataclass, field

SCHEMA = 'lamp.plan/1'


@dataclass(frozen=True)
class GroupSpec:
    """One group of the build plan (plan.json `groups[i]`)."""

    name: str
    backend: str
    precision: str
    device: str
    nodes: tuple
    inputs: tuple        # value names the group reads from outside
    outputs: tuple       # value names the group hands to other groups or the graph output
    reason: str = ''
    build: dict = field(default_factory=dict)  # backend metadata written by compile()
    side_stages: tuple = ()  # members captured from a second stream (spec fusion.side_stream)

    def to_dict(self) -> dict:
        return {'name': self.name, 'backend': self.backend, 'precision': self.precision,
                'device': self.device, 'nodes': list(self.nodes), 'inputs': list(self.inputs),
                'outputs': list(self.outputs), 'reason': self.reason,
                'side_stages': list(self.side_stages), 'build': self.build}

    @classmethod
    def from_dict(cls, d: dict) -> 'GroupSpec':
        return cls(name=d['name'], backend=d['backend'], precision=d['precision'],
                   device=d['device'], nodes=tuple(d['nodes']), inputs=tuple(d['inputs']),
                   outputs=tuple(d['outputs']), reason=d.get('reason', ''),
                   build=d.get('build', {}), side_stages=tuple(d.get('side_stages', ())))


@dataclass(frozen=True)
class BuildPlan:
    target: str
    groups: tuple          # GroupSpec, in execution order
    phases: dict           # node id -> 'inference' | 'tick'
    coverage: dict
    passes: tuple = ()     # graph passes applied before partitioning, in order
    options: dict = field(default_factory=dict)  # the spec's build: options the build used

    def group_of(self, node_id: str) -> GroupSpec:
        for g in self.groups:
            if node_id in g.nodes:
                return g
        raise KeyError(f'plan: node {node_id!r} is in no group')

    def to_dict(self) -> dict:
        return {'schema': SCHEMA, 'target': self.target,
                'groups': [g.to_dict() for g in self.groups],
                'phases': dict(self.phases), 'coverage': self.coverage,
                'passes': list(self.passes), 'options': dict(self.options)}

    @classmethod
    def from_dict(cls, d: dict) -> 'BuildPlan':
        if d.get('schema') != SCHEMA:
            raise ValueError(f'plan: schema {d.get("schema")!r}, expected {SCHEMA!r}')
        return cls(target=d['target'], groups=tuple(GroupSpec.from_dict(g) for g in d['groups']),
                   phases=d['phases'], coverage=d['coverage'], passes=tuple(d.get('passes', ())),
                   options=d.get('options', {}))
