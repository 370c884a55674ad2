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


VARIANT_EDITS = {
    'seed': lambda s: s['weights'].update(stage_seeds={'vision': 7}),
    'fp16': lambda s: s['stages']['vision'].update(precision='fp16'),
    'area': lambda s: s['policy']['glue'].update(interpolation='area'),
}


@pytest.fixture(scope='session')
def tiny_variant(tmp_path_factory):
    """tiny_variant(name) -> path of pi05_tiny compiled with one spec edit (VARIANT_EDITS),
    built on first use and shared by the whole session (about 30 s each)."""
    import yaml

    from lamp_ros.compiler.build import compile_spec
    root = tmp_path_factory.mktemp('variants')
    built = {}

    def get(name: str) -> str:
        if name not in built:
            with open(TINY_SPEC, encoding='utf-8') as f:
                spec = yaml.safe_load(f)
            VARIANT_EDITS[name](spec)
            spec_path = root / f'{name}.yaml'
            spec_path.write_text(yaml.safe_dump(spec))
            built[name] = compile_spec(str(spec_path), str(root / name)).root
        return built[name]
    return get


@pytest.fixture
def make_harness():
    """make_harness(artifact, sim=True, **node_params) -> a started RosHarness: vla_node as a
    process plus a simulated arm, a lifecycle driver and probes here (stopped after the test)."""
    from ros_harness import RosHarness
    made = []

    def make(*args, **kwargs):
        made.append(RosHarness(*args, **kwargs))
        return made[-1]
    yield make
    for h in made:
        if h.proc.poll() is None:
            h.stop()
