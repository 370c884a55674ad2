"""The synthetic scene the simulated cameras see: a table, a red cube that drifts over time and
a gripper marker placed by the arm's joints, so the images change with the robot's motion."""

import math

import cv2
import numpy as np

VIEWS = {'base': (0.0, 1.0), 'left_wrist': (0.6, 1.6), 'right_wrist': (-0.6, 1.6)}


def render(slot: str, width: int, height: int, t: float, q: np.ndarray) -> np.ndarray:
    """(height, width, 3) uint8 RGB view of the scene from camera `slot` at time t."""
    shift, zoom = VIEWS.get(slot, (0.0, 1.0))
    image = np.empty((height, width, 3), np.uint8)
    image[:] = (70, 60, 50)
    cv2.rectangle(image, (0, height * 2 // 3), (width, height), (150, 120, 90), -1)
    size = max(4, int(min(width, height) * 0.08 * zoom))
    cube_x = int(width * (0.5 + 0.25 * math.sin(0.4 * t) + 0.2 * shift))
    cube_y = int(height * 0.72)
    cv2.rectangle(image, (cube_x - size, cube_y - size), (cube_x + size, cube_y + size),
                  (220, 30, 30), -1)

    def joint(i: int) -> float:  # robots of any joint count: a joint it lacks stays at 0
        return float(q[i]) if i < len(q) - 1 else 0.0
    reach = 0.5 + 0.15 * math.tanh(joint(1)) + 0.1 * math.tanh(joint(3))
    grip_x = int(width * (0.5 + 0.3 * math.tanh(joint(0)) + 0.2 * shift))
    grip_y = int(height * (0.75 - 0.5 * reach))
    opening = int(size * (0.5 + 10 * float(q[-1])))
    cv2.line(image, (grip_x, 0), (grip_x, grip_y), (200, 200, 200), max(2, size // 3))
    cv2.rectangle(image, (grip_x - opening - 3, grip_y), (grip_x - opening, grip_y + size),
                  (240, 240, 240), -1)
    cv2.rectangle(image, (grip_x + opening, grip_y), (grip_x + opening + 3, grip_y + size),
                  (240, 240, 240), -1)
    return image
