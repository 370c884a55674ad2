"""ROS messages <-> arrays, with every malformed message refused by a reason, never a crash.

Images: sensor_msgs/Image in rgb8, bgr8, mono8 (row `step` honoured: rows may be padded), or
CompressedImage decoded with OpenCV; the policy gets HxWx3 uint8 RGB. Joint states are mapped
by name, never by index; a missing joint or a non-finite position is a rejection.
"""

import math

import cv2
import numpy as np

ENCODINGS = {'rgb8': 3, 'bgr8': 3, 'mono8': 1}


class Rejected(ValueError):
    """A message that cannot be used; the text says why (it goes to diagnostics)."""


def stamp_seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def image_to_rgb(msg) -> np.ndarray:
    """sensor_msgs/Image -> (H, W, 3) uint8 RGB (a copy: the message buffer is not kept)."""
    if msg.encoding not in ENCODINGS:
        raise Rejected(f'image encoding {msg.encoding!r} not supported '
                       f'(supported: {", ".join(ENCODINGS)})')
    channels = ENCODINGS[msg.encoding]
    h, w, step = msg.height, msg.width, msg.step
    if h == 0 or w == 0:
        raise Rejected(f'image is empty ({w}x{h})')
    if step < w * channels:
        raise Rejected(f'image step {step} < width {w} x {channels} channels')
    data = np.frombuffer(msg.data, dtype=np.uint8)
    if data.size < step * h:
        raise Rejected(f'image data has {data.size} bytes, {h} rows x step {step} need '
                       f'{step * h}')
    rows = data[:step * h].reshape(h, step)[:, :w * channels].reshape(h, w, channels)
    if msg.encoding == 'rgb8':
        return rows.copy()
    if msg.encoding == 'bgr8':
        return cv2.cvtColor(rows, cv2.COLOR_BGR2RGB)
    return cv2.cvtColor(rows[:, :, 0], cv2.COLOR_GRAY2RGB)


def compressed_to_rgb(msg) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg/png) -> (H, W, 3) uint8 RGB."""
    raw = np.frombuffer(msg.data, dtype=np.uint8)
    image = cv2.imdecode(raw, cv2.IMREAD_COLOR) if raw.size else None
    if image is None:
        raise Rejected(f'compressed image ({msg.format or "no format"}, {raw.size} bytes) '
                       'could not be decoded')
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def joint_positions(msg, joint_names) -> np.ndarray:
    """sensor_msgs/JointState -> positions in `joint_names` order (by name)."""
    if len(msg.position) != len(msg.name):
        raise Rejected(f'joint state has {len(msg.name)} names and {len(msg.position)} '
                       'positions')
    index = {name: i for i, name in enumerate(msg.name)}
    missing = [j for j in joint_names if j not in index]
    if missing:
        raise Rejected(f'joint state lacks joints {missing}')
    q = np.array([msg.position[index[j]] for j in joint_names], dtype=np.float64)
    bad = [j for j, v in zip(joint_names, q) if not math.isfinite(v)]
    if bad:
        raise Rejected(f'joint state has non-finite positions for {bad}')
    return q


def rgb_to_image(rgb: np.ndarray, encoding: str = 'rgb8'):
    """(H, W, 3) RGB -> sensor_msgs/Image (the simulator and tests publish with this)."""
    from sensor_msgs.msg import Image
    if encoding == 'bgr8':
        pixels = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    elif encoding == 'mono8':
        pixels = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[:, :, None]
    else:
        pixels = rgb
    msg = Image()
    msg.height, msg.width = int(rgb.shape[0]), int(rgb.shape[1])
    msg.encoding = encoding
    msg.step = msg.width * pixels.shape[2]
    msg.data = np.ascontiguousarray(pixels).tobytes()
    return msg


def rgb_to_compressed(rgb: np.ndarray, fmt: str = 'jpeg', quality: int = 90):
    from sensor_msgs.msg import CompressedImage
    ext = '.jpg' if fmt == 'jpeg' else '.png'
    ok, buf = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality] if fmt == 'jpeg' else [])
    if not ok:
        raise ValueError(f'could not encode {fmt}')
    msg = CompressedImage()
    msg.format = fmt
    msg.data = buf.tobytes()
    return msg


def trajectory(joint_names, points, period: float, stamp: float | None = None,
               velocities: bool = False):
    """JointTrajectory with points every `period` (time_from_start (i + 1) period). `stamp`:
    the header stamp in seconds (None: zero, "start now"); `velocities`: each point's velocity
    by finite differences of the positions (central inside, one-sided at the ends), so a
    JointTrajectoryController runs through the points instead of stopping at each."""
    from builtin_interfaces.msg import Duration, Time
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
    msg = JointTrajectory()
    msg.joint_names = list(joint_names)
    if stamp is not None:
        msg.header.stamp = Time(sec=int(stamp), nanosec=int(round((stamp % 1) * 1e9)) % 10**9)
    positions = np.asarray(points, dtype=np.float64)
    speed = np.gradient(positions, period, axis=0) if velocities and len(positions) > 1 \
        else None
    for i, q in enumerate(positions):
        point = JointTrajectoryPoint()
        point.positions = [float(v) for v in q]
        if speed is not None:
            point.velocities = [float(v) for v in speed[i]]
        t = (i + 1) * period
        point.time_from_start = Duration(sec=int(t), nanosec=int(round((t % 1) * 1e9)) % 10**9)
        msg.points.append(point)
    return msg


def float_array(values, label: str = ''):
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension
    msg = Float64MultiArray()
    msg.data = [float(v) for v in values]
    msg.layout.dim = [MultiArrayDimension(label=label, size=len(msg.data), stride=len(msg.data))]
    return msg
