"""device_letterbox: the cameras' resize-with-pad moved from the host into the vision stage.

Why: the host cannot start the GPU before every camera is letterboxed (OpenCV on one core, a
fraction of a millisecond a frame; bench/host_pixels.py times it), and the letterboxed pixels are
then copied twice more on the host (the stack of cameras, the pinned buffer). With this rewrite the
host copies each frame once, as it came, into the pinned buffer the GPU reads, and the vision stage
makes the pixels as its first operator (`lamp::letterbox`, one small kernel per camera) from tables
the host works out once per frame size (ops/letterbox.py).

What changes in the graph (graph.json; `lamp diff` shows it node by node):

    before: preprocess_image.<slot> (host, one per camera) -> stack_cameras (host) -> pixels
            -> vision
    after:  letterbox_frames (host: frames as they came, their tables, the mask)
            -> frame.<slot> ..., geometry -> vision (frames + tables -> pixels -> tokens)

`stack_cameras.image_mask` becomes `letterbox_frames.image_mask` for its readers (the prefix).
The vision node's `letterbox` attribute records each camera's buffer.

Exact, not approximate: it applies only with `linear_exact` interpolation (OpenCV's bit-exact
INTER_LINEAR_EXACT), which the device kernel reproduces byte for byte, so the artifact's pixels
are the eager policy's. The spec names the largest frame each camera sends
(`fusion.device_letterbox: {slot: [height, width]}`): a CUDA graph copies fixed-size buffers,
and that frame's bytes size the camera's (at least one size x size frame's). A larger frame is
not refused: the host letterboxes it (the same bytes, the old cost) and hands it on as a size x
size frame.
"""

from dataclasses import replace

import numpy as np

from lamp_ros.graph.graph import Node
from lamp_ros.graph.types import TensorType
from lamp_ros.ops.letterbox import FIELDS, letterbox_frames

NODE = 'letterbox_frames'
INTERPOLATION = 'linear_exact'


def frame_capacity(max_frame, size: int) -> int:
    """Bytes of a camera's device buffer: its largest frame, or one size x size frame (what a
    larger frame becomes on the host), whichever is more."""
    height, width = max_frame
    return max(int(height) * int(width), size * size) * 3


def _camera_nodes(graph):
    """(stack_cameras node, {slot: its preprocess_image node}) or a ValueError saying why the
    graph has no letterbox to move."""
    stacks = [n for n in graph.nodes if n.op == 'stack_cameras']
    if len(stacks) != 1:
        raise ValueError(f'fusion.device_letterbox: the graph needs one stack_cameras node, '
                         f'it has {len(stacks)}')
    stack, producers = stacks[0], graph.producers()
    cameras = {}
    for value, port in zip(stack.inputs, stack.ports):
        producer = producers.get(value)
        node = graph.node(producer) if producer and not producer.startswith('@') else None
        if node is None or node.op != 'preprocess_image':
            raise ValueError(f'fusion.device_letterbox: {stack.id} reads {value!r}, which no '
                             f'preprocess_image node makes')
        cameras[port.split('.', 1)[1]] = node
    return stack, cameras


def _check(stack, cameras, max_frames: dict) -> None:
    slots = list(stack.attrs['slots'])
    interpolations = sorted({n.attrs['interpolation'] for n in cameras.values()})
    if interpolations != [INTERPOLATION]:
        raise ValueError(f'fusion.device_letterbox: the device reproduces OpenCV\'s '
                         f'{INTERPOLATION} resize byte for byte and no other; the cameras\' '
                         f'preprocess_image must resize with {INTERPOLATION} (they use '
                         f'{", ".join(interpolations)}: the policy\'s option, for pi0.5 '
                         f'policy.options.glue.interpolation)')
    if set(max_frames) != set(slots):
        raise ValueError(f'fusion.device_letterbox: give the largest frame [height, width] of '
                         f'each camera slot {slots}, got {sorted(max_frames)}')
    if set(cameras) != set(slots):
        raise ValueError(f'fusion.device_letterbox: stack_cameras reads {sorted(cameras)}, '
                         f'its slots are {slots}')


def letterbox_on_device(graph, modules: dict, max_frames: dict, example: dict,
                        on_frames=None) -> tuple:
    """-> (graph, modules) with the letterbox on the vision stage's device (linted).

    max_frames: {slot: [height, width]}, the spec's `fusion.device_letterbox`. `example`
    (value name -> the trace's value) gets the new values: the frames as the vision stage's
    program receives them, flat in buffers of their camera's capacity. `on_frames(module)`:
    the policy's form of the pixels' reader that takes the frames and their tables instead
    (compiler/rewrites.py: Rewrites.letterbox_stage)."""
    if on_frames is None:
        raise ValueError('fusion.device_letterbox: the policy registers no form of its vision '
                         'stage that reads camera frames (Rewrites.letterbox_stage)')
    stack, cameras = _camera_nodes(graph)
    _check(stack, cameras, max_frames)
    slots, size = tuple(stack.attrs['slots']), int(stack.attrs['size'])
    pixels, mask = stack.outputs
    readers = [n for n in graph.nodes if pixels in n.inputs]
    if len(readers) != 1 or readers[0].kind != 'model' or pixels in graph.outputs:
        raise ValueError(f'fusion.device_letterbox: {pixels} must be read by one model stage '
                         f'alone, it is read by {[n.id for n in readers]}')
    vision = readers[0]
    if tuple(vision.inputs) != (pixels,):
        raise ValueError(f'fusion.device_letterbox: {vision.id} reads {list(vision.inputs)}, '
                         f'not the pixels alone')

    capacity = {slot: frame_capacity(max_frames[slot], size) for slot in slots}
    frames = tuple(f'{NODE}.frame.{slot}' for slot in slots)
    geometry, new_mask = f'{NODE}.geometry', f'{NODE}.image_mask'
    host = Node(
        id=NODE, op='letterbox_frames', kind='preprocess',
        inputs=tuple(cameras[slot].inputs[0] for slot in slots),
        ports=tuple(f'images.{slot}' for slot in slots),
        outputs=(*frames, geometry, new_mask),
        attrs={'slots': list(slots), 'size': size, 'interpolation': INTERPOLATION,
               'pixels': 'uint8', 'capacity': dict(capacity),
               'eager_values': {new_mask: mask}},  # parity compares it with the eager one
        source='lamp_ros/compiler/device_letterbox.py')
    moved = replace(vision, inputs=(*frames, geometry),
                    ports=(*(f'frames.{slot}' for slot in slots), 'geometry'),
                    attrs={**vision.attrs, 'letterbox': {
                        'size': size, 'interpolation': INTERPOLATION,
                        'max_frame': {s: [int(d) for d in max_frames[s]] for s in slots},
                        'frames': {f: capacity[s] for f, s in zip(frames, slots)}}})

    removed = {stack.id, *(n.id for n in cameras.values())}
    renamed = {mask: new_mask}
    nodes = []
    for node in graph.nodes:
        if node.id in removed:
            if node.id == cameras[slots[0]].id:
                nodes.append(host)  # where the first camera's stage was
            continue
        node = moved if node.id == vision.id else node
        if any(v in renamed for v in node.inputs):
            node = replace(node, inputs=tuple(renamed.get(v, v) for v in node.inputs))
        nodes.append(node)
    values = {k: t for k, t in graph.values.items()
              if k not in {*stack.outputs, *(v for n in cameras.values() for v in n.outputs)}}
    values.update({f: TensorType('uint8', (f'{slot}_bytes',)) for f, slot in zip(frames, slots)})
    values[geometry] = TensorType('int32', (1, len(slots), 2, size, len(FIELDS)))
    values[new_mask] = graph.values[mask]
    rewritten = replace(graph, nodes=tuple(nodes), values=values,
                        outputs=tuple(renamed.get(v, v) for v in graph.outputs)).lint()

    images = {slot: np.asarray(example[cameras[slot].inputs[0]]) for slot in slots
              if example.get(cameras[slot].inputs[0]) is not None}
    *made, example[geometry], example[new_mask] = letterbox_frames(images, slots, size, capacity)
    for name, slot, frame in zip(frames, slots, made):
        buffer = np.zeros(capacity[slot], np.uint8)  # as the program's input buffer holds it
        if frame is not None:
            buffer[:frame.size] = frame
        example[name] = buffer
    return rewritten, {**modules, vision.id: on_frames(modules[vision.id])}
