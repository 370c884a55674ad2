"""The act_small network: camera frames + normalised joint state -> a chunk of actions.

Each camera frame (uint8, mapped to [-1, 1] as the model's first operation) goes through a
small strided CNN, pooled to a 4x4 grid of feature tokens, tagged with its camera and grid
position. The state becomes one more token. A standard torch.nn.Transformer encodes the tokens
and decodes `horizon` learned queries into normalised actions. A missing camera's tokens are
masked out of attention (the key padding mask), so its content cannot reach the actions.
"""

import torch
from torch import nn

GRID = 4  # feature tokens per camera: GRID x GRID


class ActModel(nn.Module):
    def __init__(self, cameras: int, joints: int, horizon: int, width: int = 64, heads: int = 4,
                 layers: int = 2):
        super().__init__()
        self.cameras, self.horizon = cameras, horizon
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(GRID))
        self.camera_embed = nn.Parameter(torch.zeros(cameras, 1, width))
        self.grid_embed = nn.Parameter(torch.zeros(1, GRID * GRID, width))
        self.state_in = nn.Linear(joints, width)
        self.transformer = nn.Transformer(
            d_model=width, nhead=heads, num_encoder_layers=layers, num_decoder_layers=layers,
            dim_feedforward=2 * width, dropout=0.0, batch_first=True)
        self.queries = nn.Parameter(torch.zeros(1, horizon, width))
        self.action_out = nn.Linear(width, joints)

    def forward(self, pixels: torch.Tensor, image_mask: torch.Tensor,
                state: torch.Tensor) -> torch.Tensor:
        """pixels (1, cams, S, S, 3) uint8, image_mask (1, cams) bool, state (joints,) float
        -> normalised actions (horizon, joints)."""
        x = pixels[0].permute(0, 3, 1, 2).float() / 127.5 - 1.0    # (cams, 3, S, S)
        features = self.backbone(x).flatten(2).transpose(1, 2)    # (cams, GRID^2, width)
        tokens = features + self.grid_embed + self.camera_embed
        tokens = tokens.reshape(1, -1, features.shape[-1])
        state_token = self.state_in(state.float())[None, None]    # (1, 1, width)
        source = torch.cat([state_token, tokens], dim=1)
        missing = ~image_mask[0].repeat_interleave(GRID * GRID)   # True: ignore the token
        padding = torch.cat([missing.new_zeros(1), missing])[None]
        out = self.transformer(source, self.queries, src_key_padding_mask=padding,
                               memory_key_padding_mask=padding)
        return self.action_out(out)[0]
