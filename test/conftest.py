"""Session fixtures shared across the suite: one compiled pi05_tiny artifact (30 s on 2 cores)
and its one-edit variants. Under `scripts/run.sh test` the suite runs in several processes
(pytest-xdist workers, then the serial phase), which share each build through the folder named
by LAMP_TEST_BUILDS: the first process to ask builds it, the others wait for it and read it."""

import fcntl
import os
import tempfile

import pytest

DOMAINS = range(20, 100)  # inside ROS 2's recommended 0-101, clear of the default 0


def claim_ros_domain() -> tuple[int, object]:
    """A ROS domain no other test session on this machine holds: an exclusive lock on one file
    per domain, kept (the open file) for the whole session and released by the OS when the
    process ends, however it ends. A domain from the pid alone (the old way) put two concurrent
    sessions on one domain 1 time in 80, and their nodes then saw each other's topics."""
    folder = os.path.join(tempfile.gettempdir(), 'lamp_ros_test_domains')
    os.makedirs(folder, exist_ok=True)
    start = os.getpid() % len(DOMAINS)
    for i in range(len(DOMAINS)):
        domain = DOMAINS[(start + i) % len(DOMAINS)]
        try:
            lock = open(os.path.join(folder, f'{domain}.lock'), 'a')  # held: no `with`
        except OSError:  # e.g. a lock file another user made
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        return domain, lock
    raise RuntimeError(f'every ROS domain in {DOMAINS} is held by another test session')


# Keep ROS traffic of the tests on this machine and away from other runs. Child processes (the
# node under test, the harness) inherit the domain through the environment.
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
if 'ROS_DOMAIN_ID' not in os.environ:
    _DOMAIN, _DOMAIN_LOCK = claim_ros_domain()
    os.environ['ROS_DOMAIN_ID'] = str(_DOMAIN)

# The parallel phase (scripts/run.sh: pytest-xdist, --dist loadfile, --no-loadscope-reorder)
# hands each worker the next file in collection order when it is nearly done with its own, so
# a long file handed out last keeps one worker busy while the other has nothing left (130 s of
# 680 on 2 cores). These files go first, longest first (seconds on 2 cores, builds included),
# the two builds most files share starting on the two workers at once; the rest follow in the
# order pytest collects them.
LONG_FILES = (
    'test/compiler/test_precision_plan.py',         # 95: the int8 plan's build (85)
    'test/spec/test_spec_doc.py',                   # 75: pi05_tiny, demo, arm6, act_small builds
    'test/docs/test_guide_commands.py',             # 150
    'test/sim/world/test_world.py',                 # 70: the world's random-weights build
    'test/benchmarks/test_device_smoke.py',         # 110
    'test/docs/test_readme_commands.py',            # 105
    'test/policies/pi05/test_passes.py',            # 60
    'test/docs/test_more_guide_commands.py',        # 60
    'test/whitebox/test_diff.py',                   # 55
    'test/docs/test_bench_readme.py',               # 45
    'test/policies/pi05/test_rtc.py',               # 45
    'test/checkpoints/test_import_pi05.py',         # 45
    'test/compiler/test_compile_tiny.py',           # 40
    'test/benchmarks/test_compile_cache.py',        # 40
)


def pytest_collection_modifyitems(items):
    """LONG_FILES first, in its order; every file's tests stay together and in order."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = [path for path in LONG_FILES if not os.path.isfile(os.path.join(root, path))]
    assert not missing, f'test/conftest.py LONG_FILES: no such file {missing}'
    rank = {path: i for i, path in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split('::')[0], len(rank)))


TINY_SPEC = 'config/specs/pi05_tiny_random.yaml'
DEMO_SPEC = 'config/specs/pi05_tiny.yaml'
SHARED_BUILDS = 'LAMP_TEST_BUILDS'


def shared_build(tmp_path_factory, name: str, build) -> str:
    """Path of the artifact `build(out)` compiles into `out`, made once for every test process
    of this run. With LAMP_TEST_BUILDS unset (a plain `pytest`), it is this session's own. Else
    it lies in that folder: an exclusive lock per name makes the other processes wait while one
    builds, and a `.done` file written after the build says it is whole (a build that raised
    leaves none, so the next process to ask builds it again and sees the same error)."""
    root = os.environ.get(SHARED_BUILDS)
    if not root:
        out = str(tmp_path_factory.mktemp(name) / name)
        build(out)
        return out
    out = os.path.join(root, name)
    with open(out + '.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.exists(out + '.done'):
            build(out)  # a half-made `out` from a failed build is replaced by the compiler
            open(out + '.done', 'w').close()
    return out


def _compiler(spec: str):
    def compile_into(out: str) -> None:
        from lamp_ros.cli import main
        assert main(['compile', spec, '--out', out]) == 0
    return compile_into


@pytest.fixture(scope='session')
def tiny_artifact(tmp_path_factory):
    """Path of a freshly compiled pi05_tiny CPU artifact (read-only for tests: copy to edit)."""
    return shared_build(tmp_path_factory, 'pi05_tiny', _compiler(TINY_SPEC))


@pytest.fixture(scope='session')
def demo_artifact(tmp_path_factory):
    """The trained demo policy's CPU artifact (config/specs/pi05_tiny.yaml: the shipped LeRobot
    checkpoint, read as `lamp import` reads a user's)."""
    return shared_build(tmp_path_factory, 'pi05_tiny_demo', _compiler(DEMO_SPEC))


@pytest.fixture(scope='session')
def int8_artifact(tmp_path_factory):
    """The demo policy with a measured int8 precision plan (config/specs/pi05_tiny_int8.yaml)."""
    return shared_build(tmp_path_factory, 'pi05_tiny_int8',
                        _compiler('config/specs/pi05_tiny_int8.yaml'))


def calibrated_int8_lowering(artifact: str, tmp_path_factory, samples: int):
    """(a copy of `artifact` (the demo policy's), the int8 lowering of its ONNX Runtime group
    (backends/onnx_int8.py) calibrated on `samples` parity observations)."""
    import shutil

    from lamp_ros.artifact.load import open_artifact
    from lamp_ros.backends.onnx_int8 import Int8Lowering
    from lamp_ros.compiler.parity import parity_observations
    from lamp_ros.runtime import Runtime
    from lamp_ros.spec import load_spec
    from lamp_ros.trace.from_spec import build_pipeline
    root = str(tmp_path_factory.mktemp('int8_lowering') / 'artifact')
    shutil.copytree(artifact, root)
    (group,) = [g for g in open_artifact(root).plan.groups if g.backend == 'onnxruntime']
    runtime = Runtime.load(root)
    feeds = []
    for obs in parity_observations(build_pipeline(load_spec(DEMO_SPEC)), samples):
        runtime.reset()
        values = {}
        runtime.run(runtime.feeds(obs, 0.0), capture=values)
        feeds.append({v: values[v] for v in group.inputs})
    runtime.close()
    lowering = Int8Lowering(group, root)
    lowering.calibrate(feeds, str(tmp_path_factory.mktemp('calibration')))
    return root, lowering


@pytest.fixture(scope='session')
def act_small_artifact(tmp_path_factory):
    """The ACT-style reference policy's CPU artifact (config/specs/act_small.yaml)."""
    return shared_build(tmp_path_factory, 'act_small', _compiler('config/specs/act_small.yaml'))


@pytest.fixture(scope='session')
def point_reach_artifact(tmp_path_factory):
    """The two-model reference policy with its own glue (config/specs/point_reach.yaml)."""
    return shared_build(tmp_path_factory, 'point_reach',
                        _compiler('config/specs/point_reach.yaml'))


@pytest.fixture(scope='session')
def arm6_artifact(tmp_path_factory):
    """pi05_tiny built for the 6-joint arm + gripper (config/robots/arm6_gripper.yaml)."""
    return shared_build(tmp_path_factory, 'pi05_tiny_arm6',
                        _compiler('config/specs/pi05_tiny_arm6.yaml'))


@pytest.fixture(scope='session')
def world_demo_artifact(tmp_path_factory):
    """The demo policy of the MuJoCo world viperx_pick_place (config/specs/
    viperx_pick_place_demo.yaml: a tiny pi0.5 trained on the expert's episodes), what `lamp demo`
    builds."""
    return shared_build(tmp_path_factory, 'viperx_pick_place_demo',
                        _compiler('config/specs/viperx_pick_place_demo.yaml'))


@pytest.fixture(scope='session')
def world_random_artifact(tmp_path_factory):
    """The tiny pi0.5 with seeded random weights built for the ViperX arm of the MuJoCo world
    viperx_pick_place (config/specs/viperx_pick_place_random.yaml)."""
    return shared_build(tmp_path_factory, 'viperx_pick_place_random',
                        _compiler('config/specs/viperx_pick_place_random.yaml'))


@pytest.fixture(scope='session')
def tiny_spec():
    from lamp_ros.spec import load_spec
    return load_spec(TINY_SPEC)


@pytest.fixture(scope='session')
def tiny_graph(tiny_spec):
    """pi05_tiny's stage graph, traced on its example observation (no export: fast)."""
    from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline
    pipeline = build_pipeline(tiny_spec)
    return trace_pipeline(pipeline, pipeline.example_observation(), export=False,
                          name='pi05_tiny')


VARIANT_EDITS = {
    'seed': lambda s: s['weights'].update(stage_seeds={'vision': 7}),
    'fp16': lambda s: s['stages']['vision'].update(precision='fp16'),
    'area': lambda s: s['policy']['options']['glue'].update(interpolation='area'),
    'one_length': lambda s: s['fusion'].update(text_lengths=[]),  # every prompt at 96 tokens
    'no_passes': lambda s: s.pop('passes'),  # the prototype's modules as they are
    'prototype': lambda s: (s.pop('passes'), s['fusion'].update(text_lengths=[])),  # neither
    'split_prefix': lambda s: s['fusion'].update(split_after=['prefix']),  # its own group
    'rtc_guided': lambda s: _rtc_guided(s),
}
# Variants with one prompt length (fusion.text_lengths: []): each exports the group once, not
# at three lengths, for tests of what the lengths do not touch (`lamp diff`'s causes)
for _name in ('seed', 'fp16', 'area'):
    VARIANT_EDITS[f'{_name}_one_length'] = \
        lambda s, edit=VARIANT_EDITS[_name]: (VARIANT_EDITS['one_length'](s), edit(s))


def _rtc_guided(spec: dict) -> None:
    """Real-time chunking's guided mode; its stage's backward pass exports by the
    torch.export-based ONNX exporter only. Two Euler steps (a preset's num_steps): the
    exported backward graph grows with the steps, and onnxscript's optimiser took four of a
    ten-step build's five minutes."""
    spec['control']['chunker'].update(merge_mode='rtc', rtc={'mode': 'guided'})
    spec.setdefault('build', {})['onnx_exporter'] = 'dynamo'
    spec['policy']['options']['num_steps'] = 2
    spec['fusion']['text_lengths'] = []  # its gradient graph is traced at one prompt length


@pytest.fixture(scope='session')
def tiny_variant(tmp_path_factory):
    """tiny_variant(name, spec=TINY_SPEC) -> path of the spec (pi05_tiny with random weights,
    or DEMO_SPEC) compiled with one edit (VARIANT_EDITS), built on first use and shared by the
    whole session (about 30 s each). The edited spec is parsed where the original lies
    (lamp_ros.spec.edited_spec), as bench/tiny_cpu.py builds its variants: the same spec, the
    same artifact (test/docs serves tiny_cpu.py these builds)."""
    from lamp_ros.compiler.build import compile_spec
    from lamp_ros.spec import edited_spec
    built = {}

    def get(name: str, spec: str = TINY_SPEC) -> str:
        label = name if spec == TINY_SPEC else f'{os.path.basename(spec)[:-5]}_{name}'
        if label not in built:
            built[label] = shared_build(
                tmp_path_factory, f'variant_{label}',
                lambda out: compile_spec(edited_spec(spec, VARIANT_EDITS[name]), out))
        return built[label]
    return get


@pytest.fixture
def make_harness():
    """make_harness(artifact, sim=True, node_env=None, sim_params=None, **node_params) -> a
    started RosHarness: vla_node as a process (node_env: more environment for it) plus a
    simulated arm (sim_params: its parameters, e.g. cameras), a lifecycle driver and probes
    here (stopped after the test)."""
    from ros_harness import RosHarness
    made = []

    def make(*args, **kwargs):
        made.append(RosHarness(*args, **kwargs))
        return made[-1]
    yield make
    for h in made:
        if h.proc.poll() is None:
            h.stop()


CHECKPOINTS = os.path.join(os.path.dirname(__file__), 'data', 'checkpoints')
CHECKPOINT_FOLDERS = {'lerobot': 'lerobot_pi05_tiny', 'openpi': 'openpi_pi05_tiny'}
CHECKPOINT_JOINTS = 'shoulder_pan,shoulder_lift,elbow,wrist_1,wrist_2,wrist_3'


def import_checkpoint_spec(fmt: str, folder, joints: str = CHECKPOINT_JOINTS) -> str:
    """`lamp import` of a tiny upstream checkpoint (test/data/checkpoints) into folder/."""
    from lamp_ros.cli import main as lamp
    spec = str(folder / f'{fmt}_tiny.yaml')
    assert lamp(['import', os.path.join(CHECKPOINTS, CHECKPOINT_FOLDERS[fmt]), '--tokenizer',
                 os.path.join(CHECKPOINTS, 'tokenizer.model'), '--joint-names', joints,
                 '--out', spec]) == 0
    return spec


@pytest.fixture(scope='session')
def lerobot_sim_artifact(tmp_path_factory):
    """The tiny LeRobot checkpoint imported for six of the simulated arm's joints."""
    spec = import_checkpoint_spec('lerobot', tmp_path_factory.mktemp('import_sim'),
                                  'joint1,joint2,joint3,joint4,joint5,joint6')
    return shared_build(tmp_path_factory, 'lerobot_pi05_tiny_sim', _compiler(spec))


@pytest.fixture(scope='session')
def build_imported(tmp_path_factory):
    """format -> (spec, artifact): `lamp import` then `lamp compile` (host glue + ONNX
    Runtime), once per format for the whole run."""
    cache = {}

    def get(fmt: str):
        if fmt not in cache:
            spec = import_checkpoint_spec(fmt, tmp_path_factory.mktemp(f'import_{fmt}'))
            cache[fmt] = spec, shared_build(tmp_path_factory, f'{fmt}_pi05_tiny_ckpt',
                                            _compiler(spec))
        return cache[fmt]
    return get
