"""The eager point_reach policy: what its artifacts are compared to.

`infer`: letterbox the camera frame (lamp's host operator), find the point (model stage
`locate`), turn it into a target (the policy's own host operator, glue.py), standardise the
state (lamp's), reach (model stage `controller`), un-standardise the actions (lamp's).
"""

from dataclasses import dataclass
import json
import math
import os

import numpy as np
import torch

from lamp_ros.api import as_numpy, model_stage, PolicyInterface, stage
from lamp_ros.observation import validate_observation
from lamp_ros.ops.image import preprocess_image
from lamp_ros.ops.standardize import MeanStdStats, standardize, unstandardize

from . import glue
from .model import Controller, Locator

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'assets')


@dataclass(frozen=True)
class ReachConfig:
    """The options a spec's `policy.options` may set (pipeline.py checks them)."""

    camera: str = 'scene'
    image_size: int = 64
    horizon: int = 50


class PointReachPolicy:
    def __init__(self, config: ReachConfig, seed: int = 0, assets: str = ASSETS):
        self.config = config
        with open(os.path.join(assets, 'mean_std_sim7.json'), encoding='utf-8') as f:
            stats = json.load(f)
        self.joint_names = tuple(stats['joint_names'])
        self.state_stats = MeanStdStats.from_dict(stats['state'], 'stats.state')
        self.action_stats = MeanStdStats.from_dict(stats['actions'], 'stats.actions')
        self.calibration_path = os.path.join(assets, glue.CALIBRATION)
        self.calibration = glue.load_calibration(self.calibration_path)
        gen = torch.Generator().manual_seed(seed)
        self.locator = Locator().eval()
        self.controller = Controller(len(self.joint_names), config.horizon).eval()
        for module in (self.locator, self.controller):
            _init(module, gen)
        self.state = {}

    @property
    def interface(self) -> PolicyInterface:
        """One camera, the sim arm's joints, no prompt."""
        low = self.state_stats.mean - 2 * self.state_stats.std
        high = self.state_stats.mean + 2 * self.state_stats.std
        return PolicyInterface((self.config.camera,), self.joint_names, prompt=False,
                               camera_sizes={self.config.camera: (480, 640)},
                               state_low=tuple(map(float, low)),
                               state_high=tuple(map(float, high)),
                               action_horizon=self.config.horizon)

    @property
    def resources(self) -> dict:
        """The calibration the glue reads on the robot, packed into the artifact."""
        return {glue.CALIBRATION: self.calibration_path}

    def reset(self) -> None:
        """Nothing carries over between calls."""

    @stage('preprocess_image', 'preprocess', outputs=('pixels',), key='camera',
           attrs=lambda self: {'size': self.config.image_size, 'interpolation': 'linear',
                               'pixels': 'uint8'})
    def preprocess_image(self, image, camera: str):
        return preprocess_image(image, self.config.image_size, 'linear')

    locate = model_stage('locate', 'locator', outputs=('point',))

    @stage('point_to_target', 'host', outputs=('target',))
    def to_target(self, point):
        """(the argument name is the glue operator's: its run takes `point`)"""
        return glue.point_to_target(as_numpy(point), self.calibration)

    @stage('standardize', 'preprocess', outputs=('state',),
           attrs=lambda self: {'stats': self.state_stats.to_dict()})
    def standardize_state(self, x):
        return standardize(x, self.state_stats)

    reach = model_stage('controller', 'controller', outputs=('actions',))

    @stage('unstandardize', 'postprocess', outputs=('chunk',),
           attrs=lambda self: {'stats': self.action_stats.to_dict()})
    def unstandardize_actions(self, x):
        return unstandardize(as_numpy(x), self.action_stats)

    def infer(self, observation) -> np.ndarray:
        """observation (the camera's frame, joint state) -> chunk (horizon, joints)."""
        obs = validate_observation(observation, (self.config.camera,), len(self.joint_names),
                                   prompt=False)
        frame = obs.images.get(self.config.camera)
        if frame is None:
            raise ValueError(f'images[{self.config.camera!r}]: point_reach needs its camera')
        point = self.locate(self.preprocess_image(frame, camera=self.config.camera))
        target = self.to_target(point)
        actions = self.reach(target, self.standardize_state(obs.state))
        return self.unstandardize_actions(actions)


@torch.no_grad()
def _init(module, gen) -> None:
    for name, param in sorted(module.named_parameters()):
        fan_in = math.prod(param.shape[1:]) if param.ndim >= 2 else 1
        scale = 1 / math.sqrt(fan_in) if param.ndim >= 2 else 0.05
        param.copy_(torch.randn(param.shape, generator=gen) * scale)
