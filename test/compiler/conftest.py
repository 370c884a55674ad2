"""Shared fixtures: the tiny spec and its traced graph (no export: fast)."""

import pytest

from lamp_ros.compiler.spec import load_spec
from lamp_ros.policies.example import example_observation
from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline

SPEC = 'config/specs/pi05_tiny.yaml'


@pytest.fixture(scope='session')
def tiny_spec():
    return load_spec(SPEC)


@pytest.fixture(scope='session')
def tiny_graph(tiny_spec):
    pipeline = build_pipeline(tiny_spec)
    return trace_pipeline(pipeline, example_observation(pipeline.policy.norm_stats),
                          export=False, name='pi05_tiny')


@pytest.fixture(scope='session')
def respec():
    """respec(spec, **changes): a copy of a Spec with top-level fields replaced."""
    return lambda spec, **changes: type(spec)(**{**spec.__dict__, **changes})
