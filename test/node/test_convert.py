"""Message conversion: encodings, padded rows, compressed images, joints by name."""

import math

import numpy as np
import pytest
from sensor_msgs.msg import JointState

from lamp_ros.node import convert


@pytest.fixture
def rgb():
    return np.random.default_rng(0).integers(0, 255, (5, 7, 3), dtype=np.uint8)


@pytest.mark.parametrize('encoding', ['rgb8', 'bgr8'])
def test_color_round_trip(rgb, encoding):
    msg = convert.rgb_to_image(rgb, encoding)
    np.testing.assert_array_equal(convert.image_to_rgb(msg), rgb)


def test_mono_becomes_three_equal_channels(rgb):
    out = convert.image_to_rgb(convert.rgb_to_image(rgb, 'mono8'))
    assert out.shape == (5, 7, 3)
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()


def test_row_padding_in_step_is_skipped(rgb):
    msg = convert.rgb_to_image(rgb, 'rgb8')
    padded = np.zeros((5, 7 * 3 + 11), np.uint8)
    padded[:, :21] = rgb.reshape(5, 21)
    padded[:, 21:] = 99  # garbage in the padding must not leak into the image
    msg.step, msg.data = 32, padded.tobytes()
    np.testing.assert_array_equal(convert.image_to_rgb(msg), rgb)


@pytest.mark.parametrize('edit,reason', [
    (lambda m: setattr(m, 'encoding', '16UC1'), "encoding '16UC1' not supported"),
    (lambda m: setattr(m, 'step', 3), 'step 3 < width 7'),
    (lambda m: setattr(m, 'data', bytes(10)), 'data has 10 bytes'),
    (lambda m: setattr(m, 'height', 0), 'empty'),
])
def test_malformed_images_are_rejected_with_the_reason(rgb, edit, reason):
    msg = convert.rgb_to_image(rgb, 'rgb8')
    edit(msg)
    with pytest.raises(convert.Rejected, match=reason):
        convert.image_to_rgb(msg)


def test_compressed_png_is_exact_and_garbage_is_rejected(rgb):
    msg = convert.rgb_to_compressed(rgb, 'png')
    np.testing.assert_array_equal(convert.compressed_to_rgb(msg), rgb)
    msg.data = b'not an image'
    with pytest.raises(convert.Rejected, match='could not be decoded'):
        convert.compressed_to_rgb(msg)


def test_joints_are_mapped_by_name():
    msg = JointState()
    msg.name, msg.position = ['b', 'a', 'extra'], [2.0, 1.0, 9.0]
    np.testing.assert_array_equal(convert.joint_positions(msg, ['a', 'b']), [1.0, 2.0])
    msg.name = ['b', 'x', 'extra']
    with pytest.raises(convert.Rejected, match=r"lacks joints \['a'\]"):
        convert.joint_positions(msg, ['a', 'b'])
    msg.name, msg.position = ['a', 'b'], [math.nan, 0.0]
    with pytest.raises(convert.Rejected, match=r"non-finite positions for \['a'\]"):
        convert.joint_positions(msg, ['a', 'b'])


def test_trajectory_points_are_timed_from_now():
    msg = convert.trajectory(['a', 'b'], [np.array([1, 2]), np.array([3, 4])], 1 / 22)
    assert msg.header.stamp.sec == 0 and msg.header.stamp.nanosec == 0
    assert [p.positions.tolist() for p in msg.points] == [[1.0, 2.0], [3.0, 4.0]]
    assert msg.points[1].time_from_start.nanosec == round(2e9 / 22)


def test_a_timed_trajectory_has_the_tick_stamp_and_finite_difference_velocities():
    q = np.array([[0.0, 1.0], [0.1, 1.0], [0.3, 0.9], [0.6, 0.9]])
    msg = convert.trajectory(['a', 'b'], q, 0.05, stamp=12.25, velocities=True)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (12, 250_000_000)
    v = np.array([p.velocities for p in msg.points])
    np.testing.assert_allclose(v[0], [2.0, 0.0])             # one-sided at the start
    np.testing.assert_allclose(v[1], [3.0, -1.0])            # central: (0.3 - 0.0) / 0.1
    np.testing.assert_allclose(v[3], [6.0, 0.0])             # one-sided at the end
    times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
    np.testing.assert_allclose(times, [0.05, 0.1, 0.15, 0.2])
    single = convert.trajectory(['a', 'b'], q[:1], 0.05, velocities=True)
    assert len(single.points[0].velocities) == 0             # one point: no velocity to give
