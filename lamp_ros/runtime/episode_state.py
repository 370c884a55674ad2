"""An episode's state as plain arrays, so that a replay can continue a running episode exactly.

A recording that starts while the node is mid-episode holds the inputs of its ticks, but not
what the episode had accumulated before: the chunk plan, the smoother's and the clamp's memory,
the noise counter, the latency estimate real-time chunking predicts its delay from. The node
publishes this state after every tick that merged a chunk (no inference is in flight then: a
tick that merges a chunk starts none), and replay restores it to continue from the next tick.

Flat names: `state/<node>/<key>` for every stateful operator's arrays, `latency/samples` and
`latency/seen` for the latency window, `inference_count` for the index of the next inference.
On the wire it is a safetensors blob (exact dtypes, plain data, no pickle) with string metadata.
"""

import json
import struct

import numpy as np
from safetensors.numpy import load as load_arrays, save as save_arrays


def capture(runtime) -> dict:
    """The runtime's episode state, copied: name -> array."""
    out = {f'state/{node}/{key}': np.array(value) for node, arrays in
           runtime.state.snapshot().items() for key, value in arrays.items()}
    out['latency/samples'] = np.asarray(list(runtime.latency.samples), np.float64)
    out['latency/seen'] = np.asarray([runtime.latency.seen], np.int64)
    out['inference_count'] = np.asarray([runtime.inference_count], np.int64)
    return out


def check(runtime, arrays: dict) -> None:
    """ValueError naming the first array of a captured state that does not fit `runtime`'s
    stateful operators (another artifact's state must not be loaded half-way)."""
    current = capture(runtime)
    fixed = set(current) - {'latency/samples'}
    missing = sorted(fixed - set(arrays))
    extra = sorted(set(arrays) - set(current))
    if missing or extra:
        raise ValueError(f'episode state: arrays missing {missing[:4]} or unknown {extra[:4]}: '
                         'it is the state of an artifact with other stateful operators')
    for name in sorted(fixed):
        have, given = current[name], np.asarray(arrays[name])
        if have.shape != given.shape or have.dtype != given.dtype:
            raise ValueError(f'episode state: {name} is {given.dtype}{list(given.shape)}, this '
                             f'artifact holds {have.dtype}{list(have.shape)}')


def restore(runtime, arrays: dict) -> None:
    """Put a captured state into `runtime` (after `check`); like the node when it published
    it, the runtime then has no inference in flight."""
    check(runtime, arrays)
    runtime.discard_inference()
    by_node = {}
    for name, value in arrays.items():
        if name.startswith('state/'):
            node, key = name[len('state/'):].rsplit('/', 1)
            by_node.setdefault(node, {})[key] = np.array(value)
    for node, state in by_node.items():
        runtime.state.set(node, state)
    runtime.latency.samples.clear()
    runtime.latency.samples.extend(float(v) for v in arrays['latency/samples'])
    runtime.latency.seen = int(arrays['latency/seen'][0])
    runtime.inference_count = int(arrays['inference_count'][0])


def to_bytes(arrays: dict, metadata: dict) -> bytes:
    """safetensors bytes of `arrays`, with `metadata` (str -> str) in its header."""
    return save_arrays({k: np.ascontiguousarray(v) for k, v in arrays.items()},
                       metadata={k: str(v) for k, v in metadata.items()})


def from_bytes(data: bytes) -> tuple:
    """(arrays, metadata) from `to_bytes`; ValueError when the bytes are not such a blob."""
    data = bytes(data)
    try:
        arrays = load_arrays(data)
        (size,) = struct.unpack('<Q', data[:8])
        metadata = json.loads(data[8:8 + size]).get('__metadata__') or {}
    except Exception as exc:  # safetensors raises its own error types on damaged bytes
        raise ValueError(f'episode state: not a safetensors blob ({type(exc).__name__}: '
                         f'{exc})') from exc
    return arrays, metadata
