"""Session fixtures shared across the suite: one compiled pi05_tiny artifact (30 s on 2 cores)."""

import os

import pytest

# Keep ROS traffic of the tests on this machine and away from other runs.
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('ROS_DOMAIN_ID', str(20 + os.getpid() % 80))

TINY_SPEC = 'config/specs/pi05_tiny.yaml'


@pytest.fixture(scope='session')
def tiny_artifact(tmp_path_factory):
    """Path of a freshly compiled pi05_tiny CPU artifact (read-only for tests: copy to edit)."""
    from lamp_ros.cli import main
    out = tmp_path_factory.mktemp('artifact') / 'pi05_tiny'
    assert main(['compile', TINY_SPEC, '--out', str(out)]) == 0
    return str(out)
