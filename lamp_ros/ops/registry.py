"""Host operators by name, built from the JSON attrs that the graph stores for each node.

This is how an artifact says "run the tokenizer with these parameters" without pickles or
Python source: the graph node has an op name and attrs; the runtime looks the op up here and
builds the callable. The eager policy calls the same functions, so there is one definition of
each operation.

A stateless op factory returns `run(**inputs) -> tuple`; a stateful one returns
`(init_state() -> dict, run(state, **inputs) -> (tuple, new_state))`.
"""

from dataclasses import dataclass
from typing import Callable

from lamp_ros.ops.chunker import ActionChunker
from lamp_ros.ops.clamp import SafetyClamp
from lamp_ros.ops.delta import delta_to_absolute
from lamp_ros.ops.image import preprocess_image, stack_cameras
from lamp_ros.ops.letterbox import letterbox_frames
from lamp_ros.ops.noise import sample_noise
from lamp_ros.ops.normalize import normalize_actions, Normalizer, unnormalize_actions
from lamp_ros.ops.prompt import PromptFormat, tokenize_pi05
from lamp_ros.ops.smoother import Smoother
from lamp_ros.ops.standardize import MeanStdStats, standardize, unstandardize
from lamp_ros.ops.tokenizer import Tokenizer


@dataclass(frozen=True)
class HostOp:
    factory: Callable      # (attrs, resources) -> run or (init_state, run)
    stateful: bool = False
    optional: tuple = ()   # inputs that may be absent (None): a missing camera, no new chunk
    module: str = ''       # the module that registered it (ops/plugins.py: user operators)


HOST_OPS = {}


def host_op(name: str, stateful: bool = False, optional: tuple = ()):
    """Register `factory(attrs, resources)` as the host operator `name` (a graph node's op).
    A policy's own glue registers here too, from its own module (ops/plugins.py says how the
    artifact records that module and the runtime imports it)."""
    def register(factory):
        known = HOST_OPS.get(name)
        if known is not None and known.module != factory.__module__:
            raise ValueError(f'host op {name!r}: already registered by {known.module}; '
                             f'{factory.__module__} must name its own')
        HOST_OPS[name] = HostOp(factory, stateful, optional, factory.__module__)
        return factory
    return register


def get_host_op(name: str) -> HostOp:
    if name not in HOST_OPS:
        raise ValueError(f'host op {name!r} is not registered; known: {sorted(HOST_OPS)}')
    return HOST_OPS[name]


@host_op('normalize_state')
def _normalize_state(attrs, resources):
    normalizer = Normalizer.from_attrs(attrs, 'normalize_state')
    return lambda state: (normalizer.normalize(state),)


@host_op('standardize')
def _standardize(attrs, resources):
    stats = MeanStdStats.from_dict(attrs['stats'], 'standardize.stats')
    return lambda x: (standardize(x, stats),)


@host_op('unstandardize')
def _unstandardize(attrs, resources):
    stats = MeanStdStats.from_dict(attrs['stats'], 'unstandardize.stats')
    return lambda x: (unstandardize(x, stats),)


@host_op('discretize_state')
def _discretize_state(attrs, resources):
    fmt = PromptFormat.from_attrs(attrs)
    bins = int(attrs['bins'])
    return lambda norm_state: (fmt.discretize(norm_state, bins),)


@host_op('tokenize')
def _tokenize(attrs, resources):
    tokenizer = Tokenizer(resources['tokenizer.model'])
    if tokenizer.sha256 != attrs['tokenizer_sha256']:
        raise ValueError(f'tokenize: tokenizer file {resources["tokenizer.model"]} has sha256 '
                         f'{tokenizer.sha256[:12]}, the graph was traced with '
                         f'{attrs["tokenizer_sha256"][:12]}')
    if attrs['format'] != 'pi05':
        raise ValueError(f'tokenize: unknown prompt format {attrs["format"]!r}')
    fmt = PromptFormat.from_attrs(attrs)
    max_len = int(attrs['max_len'])
    return lambda prompt, state_bins: tokenize_pi05(tokenizer, prompt, state_bins, max_len, fmt)


def _check_pixel_format(op: str, attrs) -> None:
    """The camera stages hand uint8 pixels to the model, whose vision encoder maps them to
    [-1, 1]. A graph traced before that (no `pixels` attr) feeds its model float pixels in
    [-1, 1]: uint8 would reach it unmapped, so such an artifact is refused when it loads."""
    if attrs.get('pixels') != 'uint8':
        raise ValueError(f'{op}: this graph hands float [-1, 1] pixels to its vision model (it '
                         f'was compiled before the range mapping moved into the model); '
                         f'rebuild the artifact with `lamp compile`')


@host_op('preprocess_image')
def _preprocess_image(attrs, resources):
    _check_pixel_format('preprocess_image', attrs)
    size, interpolation = int(attrs['size']), attrs['interpolation']
    return lambda image: (preprocess_image(image, size, interpolation),)


@host_op('stack_cameras', optional=('images',))
def _stack_cameras(attrs, resources):
    _check_pixel_format('stack_cameras', attrs)
    slots, size = tuple(attrs['slots']), int(attrs['size'])
    return lambda images: stack_cameras(images, slots, size)


@host_op('letterbox_frames', optional=('images',))
def _letterbox_frames(attrs, resources):
    """The cameras' host stage when the compiler moved their letterbox onto the device
    (compiler/device_letterbox.py): frames handed on as they came, with their tables."""
    _check_pixel_format('letterbox_frames', attrs)
    if attrs.get('interpolation') != 'linear_exact':
        raise ValueError(f'letterbox_frames: the device letterbox computes linear_exact, not '
                         f'{attrs.get("interpolation")!r}')
    slots, size = tuple(attrs['slots']), int(attrs['size'])
    capacity = {slot: int(n) for slot, n in attrs['capacity'].items()}
    missing = sorted(set(slots) - set(capacity))
    if missing:
        raise ValueError(f'letterbox_frames: no buffer size for camera slots {missing}')
    return lambda images: letterbox_frames(images, slots, size, capacity)


@host_op('sample_noise', stateful=True)
def _sample_noise(attrs, resources):
    import numpy as np
    seed, shape = int(attrs['seed']), tuple(attrs['shape'])

    def init_state():
        return {'counter': np.zeros((1,), np.int64)}

    def run(state):
        noise = sample_noise(seed, int(state['counter'][0]), shape)
        return (noise,), {'counter': state['counter'] + 1}
    return init_state, run


@host_op('unnormalize_actions')
def _unnormalize_actions(attrs, resources):
    stats = Normalizer.from_attrs(attrs, 'unnormalize_actions')
    joints = int(attrs['joints'])
    return lambda actions: (unnormalize_actions(actions, stats, joints),)


@host_op('normalize_actions')
def _normalize_actions(attrs, resources):
    stats = Normalizer.from_attrs(attrs, 'normalize_actions')
    dim = int(attrs['dim'])
    return lambda committed: (normalize_actions(committed, stats, dim),)


@host_op('delta_to_absolute')
def _delta_to_absolute(attrs, resources):
    mask = list(attrs['mask'])
    return lambda chunk, state: (delta_to_absolute(chunk, state, mask),)


@host_op('chunker', stateful=True, optional=('chunk',))
def _chunker(attrs, resources):
    op = ActionChunker.from_dict(attrs)

    def run(state, chunk, t_obs, t):
        if chunk is not None:
            state = op.merge(state, chunk, t_obs, t)
        action, _ = op.action_at(state, t)
        return (action,), state
    return op.init_state, run


@host_op('smoother', stateful=True)
def _smoother(attrs, resources):
    op = Smoother.from_dict(attrs)

    def run(state, action, t):
        out, state = op.step(state, action, t)
        return (out,), state
    return op.init_state, run


@host_op('clamp', stateful=True)
def _clamp(attrs, resources):
    op = SafetyClamp.from_dict(attrs)

    def run(state, action, reference):
        out, _, state = op.step(state, action, reference)
        return (out,), state
    return op.init_state, run
