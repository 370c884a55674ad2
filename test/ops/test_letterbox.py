"""The letterbox as tables (ops/letterbox.py) and `lamp::letterbox`'s CPU implementation: both
make OpenCV's INTER_LINEAR_EXACT resize-with-pad byte for byte, at every size tried; the host
stage hands frames on without copying them, letterboxes on the host only frames past their
buffer, and blacks out absent cameras."""

import cv2
import numpy as np
import pytest
import torch

from lamp_ros.kernels import operators as kernel_ops
from lamp_ros.ops.image import resize_with_pad
from lamp_ros.ops.letterbox import (axis_taps, letterbox_frames, letterbox_geometry,
                                    letterbox_reference)
from lamp_ros.ops.registry import get_host_op

SLOTS = ('base', 'left_wrist', 'right_wrist')
# Landscape and portrait, up and down, odd sizes, the identity, a single pixel, 1080p.
SIZES = [(480, 640), (640, 480), (224, 224), (1, 1), (3, 5), (100, 300), (223, 225),
         (1080, 1920), (57, 999), (224, 100), (720, 1280), (17, 16)]


def _image(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize('size', [224, 37])
@pytest.mark.parametrize('hw', SIZES)
def test_tables_make_opencv_linear_exact_bytes(hw, size):
    image = _image(*hw)
    expected = resize_with_pad(image, size, size, 'linear_exact')
    got = letterbox_reference(image, letterbox_geometry(*hw, size))
    np.testing.assert_array_equal(got, expected)


def test_axis_taps_match_opencv_on_random_sizes():
    """One row, resized alone: the column taps and weights are OpenCV's (random src / dst)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        src, dst = (int(v) for v in rng.integers(1, 700, 2))
        row = rng.integers(0, 256, (1, src, 3), dtype=np.uint8)
        first, second, weight = axis_taps(src, dst)
        mine = (row[0, first].astype(np.int64) * (256 - weight[:, None])
                + row[0, second].astype(np.int64) * weight[:, None]) * 256
        mine = ((mine + (1 << 15)) >> 16).astype(np.uint8)
        theirs = cv2.resize(row, (dst, 1), interpolation=cv2.INTER_LINEAR_EXACT)[0]
        np.testing.assert_array_equal(mine, theirs, err_msg=f'{src} -> {dst}')


def test_geometry_is_cached_and_read_only():
    a, b = letterbox_geometry(480, 640, 224), letterbox_geometry(480, 640, 224)
    assert a is b and not a.flags.writeable and a.dtype == np.int32 and a.shape == (2, 224, 4)
    rows = a[0]
    assert not rows[:28, 3].any() and rows[28:196, 3].all() and not rows[196:, 3].any()


def test_geometry_refuses_empty_sizes():
    with pytest.raises(ValueError, match='must be >= 1'):
        letterbox_geometry(0, 640, 224)


def _padded(frames, capacity):
    """The frames as the device's buffers hold them: at the start, stale bytes after."""
    out = []
    for frame, slot in zip(frames, SLOTS):
        buffer = np.full(capacity[slot], 201, np.uint8)
        if frame is not None:
            buffer[:frame.size] = frame
        out.append(torch.from_numpy(buffer))
    return out


def test_host_stage_and_cpu_operator_make_the_host_path_bytes():
    capacity = {'base': 480 * 640 * 3, 'left_wrist': 224 * 224 * 3, 'right_wrist': 224 * 224 * 3}
    images = {'base': _image(480, 640, 1), 'left_wrist': _image(224, 224, 2),
              'right_wrist': _image(300, 400, 3)}  # past its 224x224 buffer: host letterbox
    *frames, geometry, mask = letterbox_frames(images, SLOTS, 224, capacity)
    assert np.shares_memory(frames[0], images['base'])  # handed on, not copied
    assert np.shares_memory(frames[1], images['left_wrist'])
    assert frames[2].size == 224 * 224 * 3
    assert geometry.shape == (1, 3, 2, 224, 4) and mask.tolist() == [[True, True, True]]
    pixels = kernel_ops.letterbox(_padded(frames, capacity), torch.from_numpy(geometry))
    assert pixels.shape == (1, 3, 224, 224, 3) and pixels.dtype == torch.uint8
    for i, slot in enumerate(SLOTS):
        np.testing.assert_array_equal(pixels[0, i].numpy(),
                                      resize_with_pad(images[slot], 224, 224, 'linear_exact'))


def test_absent_camera_is_black_and_masked():
    capacity = {s: 224 * 224 * 3 for s in SLOTS}
    images = {'base': _image(224, 224), 'left_wrist': None}
    *frames, geometry, mask = letterbox_frames(images, SLOTS, 224, capacity)
    assert frames[1] is None and frames[2] is None
    assert mask.tolist() == [[True, False, False]] and not geometry[0, 1:].any()
    pixels = kernel_ops.letterbox(_padded(frames, capacity), torch.from_numpy(geometry))
    assert not pixels[0, 1:].any()  # stale buffer bytes never reach the pixels


def test_cpu_operator_equals_numpy_reference_on_stale_buffers():
    rng = np.random.default_rng(9)
    for hw in SIZES[:6]:
        image, geometry = _image(*hw, 4), letterbox_geometry(*hw, 32)
        buffer = rng.integers(0, 256, image.size + 99, dtype=np.uint8)
        buffer[:image.size] = image.reshape(-1)
        got = kernel_ops.letterbox([torch.from_numpy(buffer)],
                                   torch.from_numpy(np.array(geometry)[None, None]))
        np.testing.assert_array_equal(got[0, 0].numpy(), letterbox_reference(buffer, geometry))


def test_bad_frames_are_refused_naming_the_camera():
    capacity = {s: 224 * 224 * 3 for s in SLOTS}
    with pytest.raises(ValueError, match=r"images\['base'\]: image must be uint8"):
        letterbox_frames({'base': np.zeros((4, 4, 3), np.float32)}, SLOTS, 224, capacity)
    with pytest.raises(ValueError, match=r"unknown camera slots \['top'\]"):
        letterbox_frames({'top': _image(4, 4)}, SLOTS, 224, capacity)


def test_registry_op_needs_linear_exact_and_every_buffer():
    op = get_host_op('letterbox_frames')
    attrs = {'slots': list(SLOTS), 'size': 224, 'pixels': 'uint8',
             'interpolation': 'linear_exact', 'capacity': {s: 150528 for s in SLOTS}}
    frames = op.factory(attrs, {})({'base': _image(10, 20)})
    assert len(frames) == 5 and frames[0].shape == (600,)
    with pytest.raises(ValueError, match="computes linear_exact, not 'linear'"):
        op.factory({**attrs, 'interpolation': 'linear'}, {})
    with pytest.raises(ValueError, match=r"no buffer size for camera slots \['right_wrist'\]"):
        op.factory({**attrs, 'capacity': {'base': 1, 'left_wrist': 1}}, {})
