"""point_reach's two networks: a CNN that finds a point, an MLP that reaches for a target."""

import torch
from torch import nn


class Locator(nn.Module):
    """One camera frame (S, S, 3) uint8 -> a point (2,) in the image's [-1, 1] frame."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(16, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(0))
        self.head = nn.Linear(width, 2)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(2, 0, 1)[None].float() / 127.5 - 1.0
        return torch.tanh(self.head(self.features(x)))


class Controller(nn.Module):
    """(target (3,), standardised state (joints,)) -> standardised actions (horizon, joints)."""

    def __init__(self, joints: int, horizon: int, hidden: int = 128):
        super().__init__()
        self.horizon, self.joints = horizon, joints
        self.net = nn.Sequential(nn.Linear(3 + joints, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, horizon * joints))

    def forward(self, target: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        x = torch.cat([target.float(), state.float()])
        return self.net(x).reshape(self.horizon, self.joints)
