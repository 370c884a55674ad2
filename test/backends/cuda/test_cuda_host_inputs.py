"""The cuda backend's host-side input buffers, on CPU: the graph's copies read these, so what
they hold after `fill` is what the GPU computes on. (Pinned memory needs a GPU; unpinned
buffers of the same dtypes and shapes stand in for them here.)"""

import numpy as np
import pytest
import torch

from lamp_ros.backends.cuda.run_side import HostInputs

SPECS = {'pixels': {'shape': [1, 3, 4, 4, 3], 'dtype': 'uint8'},
         'ids': {'shape': [1, 5], 'dtype': 'int64'},
         'mask': {'shape': [1, 3], 'dtype': 'bool'},
         'noise': {'shape': [1, 2, 3], 'dtype': 'bfloat16'}}


def make():
    return HostInputs(torch, SPECS, SPECS.values(), pin_memory=False)


def feeds(rng):
    return {'pixels': rng.integers(0, 256, (1, 3, 4, 4, 3), dtype=np.uint8),
            'ids': rng.integers(0, 1000, (1, 5)),
            'mask': np.array([[True, False, True]]),
            'noise': rng.standard_normal((1, 2, 3)).astype(np.float32)}


def test_fill_puts_every_feed_in_its_buffer():
    inputs, values = make(), feeds(np.random.default_rng(0))
    inputs.fill(values)
    pixels, ids, mask, noise = inputs.buffers
    np.testing.assert_array_equal(pixels.numpy(), values['pixels'])
    np.testing.assert_array_equal(ids.numpy(), values['ids'])
    np.testing.assert_array_equal(mask.numpy(), values['mask'])
    expected = torch.from_numpy(values['noise']).to(torch.bfloat16)
    assert noise.dtype == torch.bfloat16 and torch.equal(noise, expected)


def test_numpy_inputs_are_filled_through_views_of_the_buffers():
    inputs = make()
    assert inputs.views[3] is None  # bf16: cast by torch
    for buffer, view in zip(inputs.buffers[:3], inputs.views[:3]):
        assert view.ctypes.data == buffer.data_ptr()
    values = feeds(np.random.default_rng(1))
    inputs.fill(values)
    inputs.fill({**values, 'pixels': np.zeros_like(values['pixels'])})
    assert not inputs.buffers[0].numpy().any()  # the next fill overwrites, in place


def test_a_non_contiguous_feed_is_copied_by_value():
    inputs = make()
    wide = np.arange(10, dtype=np.int64).reshape(1, 10)
    inputs.fill({**feeds(np.random.default_rng(2)), 'ids': wide[:, ::2]})
    np.testing.assert_array_equal(inputs.buffers[1].numpy(), [[0, 2, 4, 6, 8]])


@pytest.mark.parametrize('name, value, message', [
    ('pixels', np.zeros((1, 3, 4, 4, 3), np.float32), 'pixels: float32 values for a uint8'),
    ('ids', np.zeros((1, 5), np.float64), 'ids: float64 values for a int64'),
    ('noise', np.zeros((1, 2, 3), np.int64), 'noise: int64 values for a bfloat16'),
    ('pixels', np.zeros((1, 3, 4, 4), np.uint8), 'pixels: shape (1, 3, 4, 4), the captured'),
])
def test_a_feed_of_another_kind_or_shape_is_refused_by_name(name, value, message):
    inputs = make()
    with pytest.raises(ValueError, match=message.replace('(', r'\(').replace(')', r'\)')):
        inputs.fill({**feeds(np.random.default_rng(3)), name: value})


def test_camera_frames_fill_their_buffer_start_and_absent_ones_keep_it():
    """The device letterbox's inputs (compiler/device_letterbox.py): flat frames of any size up
    to the buffer's; the tables read no byte past the frame, so the rest is left as it was."""
    specs = {'frame': {'shape': [40], 'dtype': 'uint8', 'frame': True}}
    inputs = HostInputs(torch, specs, specs.values(), pin_memory=False)
    (buffer,) = inputs.buffers
    inputs.fill({'frame': np.full(40, 9, np.uint8)})
    inputs.fill({'frame': np.arange(12, dtype=np.uint8)})
    np.testing.assert_array_equal(buffer.numpy(), [*range(12)] + [9] * 28)
    inputs.fill({'frame': None})  # an absent camera
    np.testing.assert_array_equal(buffer.numpy()[:12], range(12))
    for bad in (np.zeros(41, np.uint8), np.zeros((2, 3), np.uint8), np.zeros(4, np.float32)):
        with pytest.raises(ValueError, match=r'frame: a camera frame must be flat uint8 bytes, '
                                             r'at most 40'):
            inputs.fill({'frame': bad})
