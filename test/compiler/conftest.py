"""Compiler test fixtures (the tiny spec and its traced graph are test/conftest.py's)."""

import pytest


@pytest.fixture(scope='session')
def respec():
    """respec(spec, **changes): a copy of a Spec with top-level fields replaced."""
    return lambda spec, **changes: type(spec)(**{**spec.__dict__, **changes})
