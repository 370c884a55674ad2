"""Null backend: accepts every node, compiles to nothing, refuses to run.

Lets partitioner and plan tests run anywhere (tinygrad's ops_null idea): a plan with null
groups can be built, inspected and diffed, never executed.
"""

from lamp_ros.backends.base import BackendUnavailable, GroupBuild

NAME = 'null'


def supports(node) -> tuple:
    return True, 'null backend accepts everything (compile-only)'


def device_for(target: str) -> str:
    return 'cpu'


def compile(ctx) -> GroupBuild:
    return GroupBuild(files=(), metadata={'nodes': list(ctx.group.nodes)})


def load(group, ctx):
    raise BackendUnavailable(f'group {group.name}: the null backend compiles but never runs')
