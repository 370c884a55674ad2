"""The synthetic scene the simulated cameras see: a table, a red cube that drifts over time and
a gripper marker placed by the arm's joints, so the images change with the robot's motion.
`gripper_xy` is where the joints put the gripper in the base camera (task.py measures the
task's error with it); `render` draws the cube where a task puts it, or on its default drift."""

import math

import cv2
import numpy as np

VIEWS = {'base': (0.0, 1.0), 'left_wrist': (0.6, 1.6), 'right_wrist': (-0.6, 1.6)}


def _joint(q, i: int) -> float:
    """Joint i of a robot with any joint count (the last is the gripper): 0 where it has none."""
    return float(q[i]) if i < len(q) - 1 else 0.0


def gripper_xy(q, shift: float = 0.0) -> tuple:
    """(x, y) of the gripper's top in a camera, as fractions of its width and height."""
    reach = 0.5 + 0.15 * math.tanh(_joint(q, 1)) + 0.1 * math.tanh(_joint(q, 3))
    return 0.5 + 0.3 * math.tanh(_joint(q, 0)) + 0.2 * shift, 0.75 - 0.5 * reach


def render(slot: str, width: int, height: int, t: float, q: np.ndarray,
           cube_x: float | None = None) -> np.ndarray:
    """(height, width, 3) uint8 RGB view of the scene from camera `slot` at time t; `cube_x`:
    the cube's centre in the base camera as a fraction of its width (default: its drift)."""
    shift, zoom = VIEWS.get(slot, (0.0, 1.0))
    image = np.empty((height, width, 3), np.uint8)
    image[:] = (70, 60, 50)
    cv2.rectangle(image, (0, height * 2 // 3), (width, height), (150, 120, 90), -1)
    size = max(4, int(min(width, height) * 0.08 * zoom))
    centre = 0.5 + 0.25 * math.sin(0.4 * t) if cube_x is None else cube_x
    cube_x = int(width * (centre + 0.2 * shift))
    cube_y = int(height * 0.72)
    cv2.rectangle(image, (cube_x - size, cube_y - size), (cube_x + size, cube_y + size),
                  (220, 30, 30), -1)
    x, y = gripper_xy(q, shift)
    grip_x, grip_y = int(width * x), int(height * y)
    opening = int(size * (0.5 + 10 * float(q[-1])))
    cv2.line(image, (grip_x, 0), (grip_x, grip_y), (200, 200, 200), max(2, size // 3))
    cv2.rectangle(image, (grip_x - opening - 3, grip_y), (grip_x - opening, grip_y + size),
                  (240, 240, 240), -1)
    cv2.rectangle(image, (grip_x + opening, grip_y), (grip_x + opening + 3, grip_y + size),
                  (240, 240, 240), -1)
    return image
