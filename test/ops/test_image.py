"""Letterbox resize (host, uint8), camera stacking, and the [-1, 1] range the vision encoder maps
uint8 pixels to on its device."""

import numpy as np
import pytest

import torch

from lamp_ros.ops.image import INTERPOLATIONS, preprocess_image, resize_with_pad, stack_cameras
from lamp_ros.policies.pi05.siglip import to_model_range


def _constant(h, w, value=200):
    return np.full((h, w, 3), value, dtype=np.uint8)


def test_landscape_pads_rows():
    out = resize_with_pad(_constant(480, 640), 224, 224)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    # scale 0.35 -> 168x224 content, 28 black rows above and below.
    assert not out[:28].any()
    assert not out[196:].any()
    assert (out[28:196] == 200).all()
    rows = np.flatnonzero(out.any(axis=(1, 2)))
    assert (rows[0], rows[-1]) == (28, 195)


def test_portrait_pads_columns():
    out = resize_with_pad(_constant(640, 480, 90), 224, 224)
    assert not out[:, :28].any()
    assert not out[:, 196:].any()
    assert (out[:, 28:196] == 90).all()


def test_odd_padding_goes_to_the_bottom():
    # 100x300 -> 224 wide, 74.67 -> 75 rows; top pad (224 - 75) // 2 = 74, bottom 75.
    out = resize_with_pad(_constant(100, 300), 224, 224)
    rows = np.flatnonzero(out.any(axis=(1, 2)))
    assert (rows[0], rows[-1]) == (74, 148)


def test_non_square_target():
    out = resize_with_pad(_constant(480, 640), 120, 320, 'area')
    assert out.shape == (120, 320, 3)
    # height limits: scale 0.25 -> 120x160, 80 black columns each side.
    cols = np.flatnonzero(out.any(axis=(0, 2)))
    assert (cols[0], cols[-1]) == (80, 239)


def test_same_size_is_an_identical_copy():
    image = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    out = resize_with_pad(image, 224, 224)
    np.testing.assert_array_equal(out, image)
    assert out is not image
    out[0, 0, 0] ^= 1
    assert out[0, 0, 0] != image[0, 0, 0]


@pytest.mark.parametrize('name', sorted(INTERPOLATIONS))
def test_every_interpolation_works(name):
    out = resize_with_pad(_constant(480, 640, 7), 224, 224, name)
    assert (out[28:196] == 7).all()


def test_unknown_interpolation_lists_known():
    with pytest.raises(ValueError, match=r"interpolation 'bilinear'.*'area'.*'linear'"):
        resize_with_pad(_constant(480, 640), 224, 224, 'bilinear')


@pytest.mark.parametrize('image', [
    np.zeros((480, 640, 3), dtype=np.float32),
    np.zeros((480, 640), dtype=np.uint8),
    np.zeros((480, 640, 4), dtype=np.uint8),
])
def test_bad_image_named(image):
    with pytest.raises(ValueError, match='image'):
        resize_with_pad(image, 224, 224)


def test_to_model_range_exact():
    out = to_model_range(torch.tensor([[[0, 255, 128]]], dtype=torch.uint8))
    assert out.dtype == torch.float32
    assert out[0, 0, 0] == -1.0
    assert out[0, 0, 1] == 1.0
    assert out[0, 0, 2] == np.float32(128) * np.float32(2.0 / 255.0) - np.float32(1.0)
    assert abs(float(out[0, 0, 2]) - 1.0 / 255.0) < 1e-6


def test_to_model_range_rejects_float():
    with pytest.raises(ValueError, match='uint8'):
        to_model_range(torch.zeros((2, 2, 3), dtype=torch.float32))


def test_host_preprocessing_stays_uint8():
    out = preprocess_image(_constant(480, 640), 224)
    assert out.dtype == np.uint8 and out.shape == (224, 224, 3)
    pixels, mask = stack_cameras({'a': out}, ['a', 'b'], 224)
    assert pixels.dtype == np.uint8 and pixels.shape == (1, 2, 224, 224, 3)
    assert mask.tolist() == [[True, False]]
    assert not pixels[0, 1].any()  # the missing camera is black (and masked)


@pytest.mark.parametrize('image', [np.zeros((224, 224, 3), np.float32),
                                   np.zeros((100, 100, 3), np.uint8)])
def test_stack_cameras_names_a_bad_image(image):
    with pytest.raises(ValueError, match=r"images\['a'\].*uint8"):
        stack_cameras({'a': image}, ['a'], 224)
