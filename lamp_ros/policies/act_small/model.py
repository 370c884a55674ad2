"""The act_small network: camera frames + normalised joint state -> a chunk of actions.

Each camera frame (uint8, mapped to [-1, 1] as the model's first operation) goes through a
small strided CNN, pooled to a grid x grid of feature tokens (4x4 by default), each tagged
with its camera and grid position. With `keypoints` K > 0, each camera also gets one token of K
keypoints: a spatial softmax over K 1x1-conv maps of the unpooled features gives each map's
expected (x, y) (Levine et al. 2016; what Diffusion Policy's ResNet ends in), a place finer
than a grid cell, which a pick needs. The state becomes one more token. A standard
torch.nn.Transformer encodes the tokens and decodes `horizon` learned queries into normalised
actions. A missing camera's tokens are
masked out of attention (the key padding mask), so its content cannot reach the actions.
"""

import torch
from torch import nn


class ActModel(nn.Module):
    def __init__(self, cameras: int, joints: int, horizon: int, width: int = 64, heads: int = 4,
                 layers: int = 2, grid: int = 4, keypoints: int = 0):
        super().__init__()
        self.cameras, self.horizon, self.grid = cameras, horizon, grid
        self.tokens_per_camera = grid * grid + (1 if keypoints else 0)
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(grid))
        self.camera_embed = nn.Parameter(torch.zeros(cameras, 1, width))
        self.grid_embed = nn.Parameter(torch.zeros(1, grid * grid, width))
        if keypoints:
            self.keypoint_maps = nn.Conv2d(width, keypoints, 1)
            self.keypoint_in = nn.Linear(2 * keypoints, width)
        self.state_in = nn.Linear(joints, width)
        self.transformer = nn.Transformer(
            d_model=width, nhead=heads, num_encoder_layers=layers, num_decoder_layers=layers,
            dim_feedforward=2 * width, dropout=0.0, batch_first=True)
        self.queries = nn.Parameter(torch.zeros(1, horizon, width))
        self.action_out = nn.Linear(width, joints)

    def forward(self, pixels: torch.Tensor, image_mask: torch.Tensor,
                state: torch.Tensor) -> torch.Tensor:
        """pixels (1, cams, S, S, 3) uint8, image_mask (1, cams) bool, state (joints,) float
        -> normalised actions (horizon, joints): one observation, as the pipeline runs it."""
        return self.forward_batch(pixels, image_mask, state[None])[0]

    def forward_batch(self, pixels: torch.Tensor, image_mask: torch.Tensor,
                      state: torch.Tensor) -> torch.Tensor:
        """pixels (b, cams, S, S, 3) uint8, image_mask (b, cams) bool, state (b, joints) float
        -> normalised actions (b, horizon, joints): what training runs."""
        b, cams, size = pixels.shape[0], pixels.shape[1], pixels.shape[2]
        x = pixels.reshape(b * cams, size, size, 3).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        feature_map = self.backbone[:-1](x)                       # (b cams, width, h, w)
        features = self.backbone[-1](feature_map).flatten(2).transpose(1, 2)  # (., grid^2, .)
        width = features.shape[-1]
        tokens = features.reshape(b, cams, -1, width) + self.grid_embed[:, None]
        if self.tokens_per_camera > self.grid * self.grid:
            points = self.keypoint_in(spatial_softmax(self.keypoint_maps(feature_map)))
            tokens = torch.cat([tokens, points.reshape(b, cams, 1, width)], dim=2)
        tokens = (tokens + self.camera_embed[None]).reshape(b, -1, width)
        state_token = self.state_in(state.float())[:, None]      # (b, 1, width)
        source = torch.cat([state_token, tokens], dim=1)
        missing = ~image_mask.repeat_interleave(self.tokens_per_camera, dim=1)  # True: ignore
        padding = torch.cat([missing.new_zeros(b, 1), missing], dim=1)
        out = self.transformer(source, self.queries.expand(b, -1, -1),
                               src_key_padding_mask=padding, memory_key_padding_mask=padding)
        return self.action_out(out)


def spatial_softmax(maps: torch.Tensor) -> torch.Tensor:
    """(n, K, h, w) -> (n, 2K): per map, the softmax-weighted mean of the x and y coordinates
    (-1 .. 1 across the image)."""
    n, k, h, w = maps.shape
    weights = torch.softmax(maps.reshape(n, k, h * w), dim=-1).reshape(n, k, h, w)
    xs = torch.linspace(-1.0, 1.0, w, dtype=maps.dtype, device=maps.device)
    ys = torch.linspace(-1.0, 1.0, h, dtype=maps.dtype, device=maps.device)
    x = (weights.sum(dim=2) * xs).sum(dim=-1)
    y = (weights.sum(dim=3) * ys).sum(dim=-1)
    return torch.cat([x, y], dim=-1)
