"""point_reach's glue: a 2D point in the camera frame -> a 3D target for the arm, in numpy.

It runs on the robot, so it is the policy's own host operator (`host_op`): the artifact
records this module and the sha256 of its source, and `Runtime.load` imports it again (it must
not import torch). The calibration (camera -> arm base) is a resource file the artifact packs.
"""

import json

import numpy as np

from lamp_ros.api import host_op

CALIBRATION = 'calibration.json'


def load_calibration(path: str) -> dict:
    with open(path, encoding='utf-8') as f:
        calibration = json.load(f)
    for key, size in (('offset', 3), ('scale', 2)):
        if len(calibration.get(key, ())) != size:
            raise ValueError(f'{path}: {key} must hold {size} numbers')
    return calibration


def point_to_target(point, calibration: dict) -> np.ndarray:
    """point (2,) in the image's [-1, 1] frame -> target (3,) in the arm's base frame."""
    point = np.asarray(point, dtype=np.float32).reshape(2)
    offset = np.asarray(calibration['offset'], dtype=np.float32)
    scale = np.asarray(calibration['scale'], dtype=np.float32)
    target = offset.copy()
    target[:2] += scale * point
    target[2] = calibration.get('z', offset[2])
    return target


@host_op('point_to_target')
def _point_to_target(attrs, resources):
    calibration = load_calibration(resources[CALIBRATION])
    return lambda point: (point_to_target(point, calibration),)
