"""The eager act_small policy: what its artifacts are compared to.

`infer(observation) -> chunk (horizon, joints)`: standardise the state (host), letterbox each
camera frame (host), stack the cameras with a presence mask (host), run the network (model
stage), un-standardise the actions (host). Every step is a marked stage, so the tracer records
the pipeline; the host steps are lamp's own operators, so the artifact needs no code of ours.
"""

from dataclasses import dataclass
import json
import math
import os

import numpy as np
import torch

from lamp_ros.api import as_numpy, model_stage, PolicyInterface, stage
from lamp_ros.observation import validate_observation
from lamp_ros.ops.image import preprocess_image, stack_cameras
from lamp_ros.ops.standardize import MeanStdStats, standardize, unstandardize
from lamp_ros.policies.act_small.model import ActModel
from lamp_ros.policies.weights_file import load_weights

STATS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'assets',
                     'mean_std_sim7.json')


@dataclass(frozen=True)
class ActConfig:
    """The options a spec's `policy.options` may set (pipeline.py checks them)."""

    cameras: tuple = ('front', 'side')
    image_size: int = 96
    horizon: int = 50
    width: int = 64
    layers: int = 2
    grid: int = 4             # feature tokens per camera: grid x grid
    keypoints: int = 0        # spatial-softmax keypoints per camera, as one more token (0: none)


class ActPolicy:
    def __init__(self, config: ActConfig, stats: dict, seed: int = 0,
                 weights_file: str | None = None):
        self.config = config
        self.joint_names = tuple(stats['joint_names'])
        self.state_stats = MeanStdStats.from_dict(stats['state'], 'stats.state')
        self.action_stats = MeanStdStats.from_dict(stats['actions'], 'stats.actions')
        torch.manual_seed(seed)
        self.model = ActModel(len(config.cameras), len(self.joint_names), config.horizon,
                              config.width, layers=config.layers, grid=config.grid,
                              keypoints=config.keypoints).eval()
        _init(self.model, seed)
        if weights_file is not None:   # the spec's options must describe the trained network
            load_weights(self.model, weights_file)
        self.state = {}

    @classmethod
    def create(cls, config: ActConfig, seed: int = 0, stats_path: str = STATS) -> 'ActPolicy':
        with open(stats_path, encoding='utf-8') as f:
            return cls(config, json.load(f), seed)

    @classmethod
    def trained(cls, config: ActConfig, weights_file: str) -> 'ActPolicy':
        """Trained weights (safetensors) and, beside them, the stats they were trained with
        (`stats.json`: joint_names, state and actions mean/std)."""
        stats_path = os.path.join(os.path.dirname(weights_file), 'stats.json')
        for path in (weights_file, stats_path):
            if not os.path.isfile(path):
                raise FileNotFoundError(f'act_small checkpoint: {path} is missing')
        with open(stats_path, encoding='utf-8') as f:
            stats = json.load(f)
        return cls(config, stats, weights_file=weights_file)

    @property
    def interface(self) -> PolicyInterface:
        """Its own cameras (any frame size), the sim arm's joints, no prompt."""
        low = self.state_stats.mean - 2 * self.state_stats.std
        high = self.state_stats.mean + 2 * self.state_stats.std
        return PolicyInterface(self.config.cameras, self.joint_names, prompt=False,
                               camera_sizes={c: (480, 640) for c in self.config.cameras},
                               state_low=tuple(map(float, low)),
                               state_high=tuple(map(float, high)),
                               action_horizon=self.config.horizon)

    def reset(self) -> None:
        """Nothing carries over between calls (no noise, no memory)."""

    @stage('standardize', 'preprocess', outputs=('state',),
           attrs=lambda self: {'stats': self.state_stats.to_dict()})
    def standardize_state(self, x):
        """(argument names are the host operator's: lamp's `standardize` takes x)"""
        return standardize(x, self.state_stats)

    @stage('preprocess_image', 'preprocess', outputs=('pixels',), key='camera',
           attrs=lambda self: {'size': self.config.image_size, 'interpolation': 'linear',
                               'pixels': 'uint8'})
    def preprocess_image(self, image, camera: str):
        return preprocess_image(image, self.config.image_size, 'linear')

    @stage('stack_cameras', 'host', outputs=('pixels', 'image_mask'),
           attrs=lambda self: {'slots': list(self.config.cameras),
                               'size': self.config.image_size, 'pixels': 'uint8'})
    def stack_cameras(self, images: dict):
        return stack_cameras(images, self.config.cameras, self.config.image_size)

    network = model_stage('network', 'model', outputs=('actions',))

    @stage('unstandardize', 'postprocess', outputs=('chunk',),
           attrs=lambda self: {'stats': self.action_stats.to_dict()})
    def unstandardize_actions(self, x):
        return unstandardize(as_numpy(x), self.action_stats)

    def infer(self, observation) -> np.ndarray:
        """observation (images by camera slot, state) -> chunk (horizon, joints), robot units."""
        interface = self.interface
        obs = validate_observation(observation, interface.camera_slots, len(self.joint_names),
                                   prompt=False)
        state = self.standardize_state(obs.state)
        frames = {slot: self.preprocess_image(img, camera=slot)
                  for slot, img in obs.images.items()}
        pixels, mask = self.stack_cameras(frames)
        return self.unstandardize_actions(self.network(pixels, mask, state))


@torch.no_grad()
def _init(model, seed: int) -> None:
    """Weights from a private generator, scaled to keep activations O(1) (random weights whose
    outputs still depend on every input, so parity and tests mean something)."""
    gen = torch.Generator().manual_seed(seed)
    for name, param in sorted(model.named_parameters()):
        if param.ndim >= 2:
            fan_in = math.prod(param.shape[1:]) if 'embed' not in name and name != 'queries' \
                else 1
            param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
        elif name.endswith('weight'):
            param.copy_(1.0 + 0.02 * torch.randn(param.shape, generator=gen))
        else:
            param.copy_(0.02 * torch.randn(param.shape, generator=gen))
