"""The model spec (YAML): what to build, from which weights, for which target, and how.

Every key is known; an unknown key or an impossible choice is an error that names the key path
(`stages.vision.backend: 'tensorrt' is not available for target 'cpu'`). The spec is the one
input of `lamp trace` and `lamp compile`, and it is copied into the artifact, so the artifact
says how it was made.
"""

from dataclasses import dataclass, field
import os

from lamp_ros.spec.build_options import (build_options, BuildOptions, check_keys, read_yaml,
                                         SpecError)
from lamp_ros.spec.keys import SPEC_KEYS
from lamp_ros.spec.precision import precision_plan, PrecisionPlan
from lamp_ros.spec.robot import parse_robot, Robot

# The shortest prompt length a group runs at: torch.export specialises a dimension of size 0 or
# 1, so the exported text axis stays dynamic only from 2 (backends/text_lengths.py).
MIN_LENGTH = 2

DEFAULT_RATE_HZ = 22.0  # the control rate of a spec that names none (the artifact's abi.rate_hz)
SCHEMA = 'lamp.spec/1'
TARGETS = ('cpu', 'cuda', 'tensorrt')
BACKENDS = ('host', 'onnxruntime', 'tensorrt', 'cuda')
PRECISIONS = ('fp32', 'bf16', 'fp16')
BACKENDS_FOR_TARGET = {
    'cpu': ('host', 'onnxruntime'),
    'cuda': ('host', 'onnxruntime', 'cuda'),
    'tensorrt': ('host', 'onnxruntime', 'tensorrt', 'cuda'),
}


@dataclass(frozen=True)
class StageChoice:
    """Backend and precision for one stage (or the default), with fallbacks in order."""

    backend: str
    precision: str = 'fp32'
    fallback: tuple = ()
    reason: str = ''


@dataclass(frozen=True)
class Spec:
    name: str
    policy: dict        # entry ('module:function'), options (the policy's own, it checks them)
    weights: dict       # seed + stage_seeds, or file, or a checkpoint: format, path(, asset_id)
    control: dict       # rate_hz, chunker, smoother, clamp
    target: str
    stages: dict        # stage op -> StageChoice ('default' included)
    fusion: dict        # fuse_adjacent: bool, split_after: [node ids], side_stream: [node ids],
    #                     text_lengths: [prompt lengths a cuda / onnxruntime group also runs at],
    #                     device_letterbox: {camera slot: [height, width] of its largest frame}
    parity: dict        # samples, atol, rtol; missing_camera (only where false)
    passes: dict = field(default_factory=dict)
    build: BuildOptions = BuildOptions()
    source: str = ''    # path the spec was read from
    robot: Robot | None = None  # the embodiment (spec/robot.py); None: the policy's own
    precision: PrecisionPlan = PrecisionPlan()  # spec/precision.py: manual or planned

    @property
    def parity_missing_camera(self) -> bool:
        """Whether every third parity sample goes without its last camera (compiler/parity.py;
        spec `parity.missing_camera`, true unless the spec says false)."""
        return self.parity.get('missing_camera', True)

    def choice(self, op: str) -> StageChoice:
        return self.stages.get(op, self.stages['default'])

    def resolve(self, path: str) -> str:
        """A path the spec names (a checkpoint, a tokenizer): relative to the spec's folder, so
        a spec and the files beside it move together."""
        if os.path.isabs(path) or not self.source:
            return path
        return os.path.join(os.path.dirname(os.path.abspath(self.source)), path)

    def to_dict(self) -> dict:
        return {'schema': SCHEMA, 'name': self.name, 'policy': self.policy,
                'weights': self.weights, 'control': self.control, 'target': self.target,
                'stages': {k: {'backend': c.backend, 'precision': c.precision,
                               'fallback': list(c.fallback), 'reason': c.reason}
                           for k, c in self.stages.items()},
                'fusion': self.fusion, 'parity': self.parity, 'passes': self.passes,
                'build': self.build.to_dict(),
                **({'robot': self.robot.to_dict()} if self.robot else {}),
                # only a spec that plans: the ids of every other spec stay as they were
                **({'precision': self.precision.to_dict()}
                   if self.precision != PrecisionPlan() else {})}


def _stage_choice(d, where, target) -> StageChoice:
    check_keys(d, SPEC_KEYS['stages.<stage>'], where)
    if 'backend' not in d:
        raise SpecError(f'{where}.backend: missing')
    choice = StageChoice(d['backend'], d.get('precision', 'fp32'), tuple(d.get('fallback', ())),
                         d.get('reason', ''))
    for i, backend in enumerate((choice.backend, *choice.fallback)):
        key = f'{where}.backend' if i == 0 else f'{where}.fallback[{i - 1}]'
        if backend not in BACKENDS:
            raise SpecError(f'{key}: unknown backend {backend!r}; known: {", ".join(BACKENDS)}')
        if i == 0 and backend not in BACKENDS_FOR_TARGET[target]:
            raise SpecError(f'{key}: {backend!r} is not available for target {target!r} '
                            f'(possible: {", ".join(BACKENDS_FOR_TARGET[target])})')
    if choice.precision not in PRECISIONS:
        raise SpecError(f'{where}.precision: {choice.precision!r} not in {PRECISIONS}')
    if choice.precision == 'bf16' and target == 'cpu':
        raise SpecError(f'{where}.precision: bf16 needs a GPU target (ONNX Runtime\'s CPU '
                        'provider has no bf16 kernels); the target is cpu')
    if choice.precision == 'fp16' and target == 'cpu' and choice.backend != 'onnxruntime':
        raise SpecError(f'{where}.precision: fp16 on target cpu only with the onnxruntime '
                        'backend')
    return choice


def _parity(d) -> dict:
    """parity: samples, atol, rtol, and missing_camera (default true: every third sample goes
    without its last camera, compiler/parity.py). missing_camera is kept only where false, so
    the ids of the artifacts of every other spec stay as they were."""
    check_keys(d, SPEC_KEYS['parity'], 'parity')
    parity = {'samples': 4, 'atol': 1e-4, 'rtol': 1e-3, **d}
    if int(parity['samples']) < 1:
        raise SpecError('parity.samples: must be >= 1')
    missing_camera = parity.pop('missing_camera', True)
    if not isinstance(missing_camera, bool):
        raise SpecError(f'parity.missing_camera: true (every third parity sample goes without '
                        f'its last camera) or false (every sample has every camera), got '
                        f'{missing_camera!r}')
    return parity if missing_camera else {**parity, 'missing_camera': False}


def _passes(d) -> dict:
    """{pass name: bool}. Which names exist is the policy's (its registered rewrites,
    compiler/rewrites.py): the build checks them once the policy is loaded."""
    check_keys(d, set(d) if isinstance(d, dict) else (), 'passes')
    for name, on in d.items():
        if not isinstance(on, bool):
            raise SpecError(f'passes.{name}: expected true or false, got {on!r}')
    return dict(d)


def parse_spec(d: dict, source: str = '') -> Spec:
    """Validate a spec mapping into a Spec; errors name the key path."""
    check_keys(d, SPEC_KEYS[''], '')
    if d.get('schema', SCHEMA) != SCHEMA:
        raise SpecError(f'schema: {d["schema"]!r}, expected {SCHEMA!r}')
    for key in ('name', 'policy', 'target'):
        if key not in d:
            raise SpecError(f'{key}: missing')
    policy = d['policy']
    check_keys(policy, SPEC_KEYS['policy'], 'policy')
    entry = policy.get('entry')
    if not isinstance(entry, str) or entry.count(':') != 1 or not all(entry.split(':')):
        raise SpecError(f"policy.entry: 'module:function' that builds the pipeline, got "
                        f'{entry!r}')
    if not isinstance(policy.get('options', {}), dict):
        raise SpecError(f'policy.options: a mapping (the policy checks its keys), got '
                        f'{policy["options"]!r}')
    policy = {'entry': entry, 'options': dict(policy.get('options') or {})}
    weights = d.get('weights', {'seed': 0})
    check_keys(weights, SPEC_KEYS['weights'], 'weights')
    given = [k for k, keys in (('seed', ('seed', 'stage_seeds')), ('file', ('file',)),
                               ('checkpoint', ('format', 'path', 'asset_id')))
             if any(key in weights for key in keys)]
    if len(given) > 1:
        raise SpecError(f'weights: give one of seed/stage_seeds, file, or a checkpoint '
                        f'(format, path), not {" and ".join(given)}')
    if given == ['checkpoint'] and not ('format' in weights and 'path' in weights):
        raise SpecError('weights: a checkpoint needs both format and path')
    control = d.get('control', {})
    check_keys(control, SPEC_KEYS['control'], 'control')
    control = {'rate_hz': DEFAULT_RATE_HZ, **control}
    if not isinstance(control['rate_hz'], (int, float)) or not control['rate_hz'] > 0:
        raise SpecError(f'control.rate_hz: a rate in Hz > 0, got {control["rate_hz"]!r}')
    robot = None
    if d.get('robot') is not None:
        base = os.path.dirname(os.path.abspath(source)) if source else os.getcwd()
        robot = parse_robot(d['robot'], base, float(control['rate_hz']))
        # the clamp's limits are the robot's; control.clamp, when given, overrides key by key
        control['clamp'] = {**robot.clamp(), **control.get('clamp', {})}
        if robot.delta_mask is not None:
            control['delta_mask'] = list(robot.delta_mask)
    target = d['target']
    if target not in TARGETS:
        raise SpecError(f'target: {target!r} not in {TARGETS}')
    stages_in = d.get('stages', {})
    check_keys(stages_in, set(stages_in), 'stages')
    stages = {k: _stage_choice(v, f'stages.{k}', target) for k, v in stages_in.items()}
    stages.setdefault('default', StageChoice('host', reason='host reference for every stage'))
    fusion = d.get('fusion', {})
    check_keys(fusion, SPEC_KEYS['fusion'], 'fusion')
    _check_device_letterbox(fusion.get('device_letterbox'), target)
    side = fusion.get('side_stream', [])
    if not isinstance(side, list) or not all(isinstance(s, str) for s in side):
        raise SpecError(f'fusion.side_stream: a list of stage names, got {side!r}')
    lengths = fusion.get('text_lengths', [])
    if (not isinstance(lengths, list)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= MIN_LENGTH
                       for n in lengths)
            or any(a >= b for a, b in zip(lengths, lengths[1:]))):
        raise SpecError(f'fusion.text_lengths: prompt lengths in tokens, each >= {MIN_LENGTH}, '
                        f'in increasing order, got {lengths!r}')
    parity = _parity(d.get('parity', {}))
    passes = _passes(d.get('passes', {}))
    fusion = {'fuse_adjacent': True, 'split_after': [], 'side_stream': [], 'text_lengths': [],
              **fusion}
    return Spec(name=d['name'], policy=policy, weights=weights, control=control, target=target,
                stages=stages, fusion=fusion, parity=parity, passes=passes,
                build=build_options(d.get('build') or {}), source=source, robot=robot,
                precision=precision_plan(d.get('precision') or {}))


def _check_device_letterbox(frames, target: str) -> None:
    """fusion.device_letterbox (compiler/device_letterbox.py): {slot: [height, width]}, the
    largest frame each camera sends, for a cuda target (its CUDA graph copies the frames)."""
    if frames is None:
        return
    if target != 'cuda':
        raise SpecError(f'fusion.device_letterbox: the letterbox runs on a cuda target\'s GPU; '
                        f'this spec\'s target is {target!r}')
    if not isinstance(frames, dict) or not frames:
        raise SpecError(f'fusion.device_letterbox: {{camera slot: [height, width]}}, got '
                        f'{frames!r}')
    for slot, size in frames.items():
        if (not isinstance(size, list) or len(size) != 2
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                           for d in size)
                or size[0] * size[1] * 3 >= 2 ** 31):
            raise SpecError(f'fusion.device_letterbox.{slot}: the largest frame as [height, '
                            f'width] in pixels (under 2 GB), got {size!r}')


def load_spec(path: str) -> Spec:
    """Read and validate a spec YAML file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'spec: no file {path}')
    return parse_spec(read_yaml(path, 'spec') or {}, source=path)


ARTIFACT_SPEC = 'spec.json'   # the spec an artifact was built from, as parsed


def load_artifact_spec(root: str) -> Spec:
    """The spec an artifact was built from (its spec.json), its paths resolved against the
    artifact's folder, wherever the command runs (never the working directory).

    The paths (a checkpoint, a tokenizer, a calibration folder) are kept as the spec file wrote
    them, relative to its folder, which the artifact does not record: where one builds must
    not change the artifact id, and evidence files are copied into committed results. The
    artifact's folder stands in for it, right for the layout the docs use: a spec in
    config/specs/ built into artifacts/<name>, both two folders below the repository. Elsewhere
    a path names a file that is not there, and the error names the path it tried."""
    import json
    path = os.path.join(root, ARTIFACT_SPEC)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'artifact {root}: no {ARTIFACT_SPEC}')
    with open(path, encoding='utf-8') as f:
        return parse_spec(json.load(f), source=os.path.abspath(path))
