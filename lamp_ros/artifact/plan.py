"""The build plan (plan.json): groups in execution order with backend, precision, device,
members and the reason for each choice, the phase of every node, the coverage table."""

from dataclasses import dataclass, field

from lamp_ros.backends.base import GroupSpec

SCHEMA = 'lamp.plan/1'


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
