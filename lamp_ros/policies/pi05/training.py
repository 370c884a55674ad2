"""Training a pi0.5-shaped policy with the flow-matching loss (the openpi / LeRobot recipe).

For a batch of observations and their action chunks (normalised, padded to the model's action
dim with zeros): draw noise and a flow time t ~ Beta(1.5, 1) * 0.999 + 0.001, form x_t =
t noise + (1 - t) actions, and regress the expert's velocity on u = noise - actions over every
action dim, the padding included, as openpi does. (LeRobot's fine-tuning loss covers the
robot's dims only, which suits a pretrained model; a model trained from scratch that way
integrates untrained velocities in the padded dims, and those feed back into the expert at
every step: its actions then ignore the observation.)

Real-time chunking, trained mode (Black et al. 2025; LeRobot's RTC, trained variant): each
sample also draws an inference delay d uniform in [0, max_delay]. Its first d actions (those
a robot executes while the next chunk is computed) are given clean, at flow time 0, and the
loss covers only the rest, so at run time a chunk can be generated around the committed prefix
by inpainting alone, without a backward pass.

The observations go through the policy's own host stages (Pi05Policy: state normalisation and
binning, the prompt, the tokenizer, resize-with-pad), so the model is trained on exactly the
inputs the deployed pipeline gives it.
"""

import numpy as np
import torch
from torch.nn import functional as F

from lamp_ros.ops.normalize import pad_to_dim
from lamp_ros.policies.training import learning_rate, optimise, TrainConfig  # noqa: F401

TIME_BETA = (1.5, 1.0)
TIME_SCALE, TIME_OFFSET = 0.999, 0.001


def model_inputs(policy, observations) -> dict:
    """A batch of observations -> the model's input tensors, by the policy's host stages."""
    pixels, image_masks, ids, masks = zip(*(policy.model_inputs(obs) for obs in observations))
    return {'images': torch.from_numpy(np.concatenate(pixels)),
            'image_mask': torch.from_numpy(np.concatenate(image_masks)),
            'token_ids': torch.from_numpy(np.concatenate(ids)).long(),
            'token_mask': torch.from_numpy(np.concatenate(masks))}


def normalised_actions(policy, chunks: np.ndarray) -> torch.Tensor:
    """(b, horizon, joints) in robot units -> (b, horizon, action_dim) in the model's space."""
    norm = policy.robot.actions.normalize(np.asarray(chunks, np.float32))
    return torch.from_numpy(pad_to_dim(norm, policy.config.action_dim).astype(np.float32))


def flow_matching_loss(model, inputs: dict, actions: torch.Tensor, rng: np.random.Generator,
                       max_delay: int = 0) -> torch.Tensor:
    """Mean squared velocity error over all action dims (and, with delays, over the actions
    after each sample's delay). Noise, times and delays come from `rng`."""
    b, horizon, _ = actions.shape
    noise = torch.from_numpy(rng.standard_normal(actions.shape, np.float32))
    t = torch.from_numpy((rng.beta(*TIME_BETA, b) * TIME_SCALE + TIME_OFFSET).astype(np.float32))
    delay = torch.from_numpy(rng.integers(0, max_delay + 1, b))
    committed = torch.arange(horizon)[None, :] < delay[:, None]          # (b, horizon)
    t_tokens = torch.where(committed, torch.zeros(()), t[:, None])       # clean: time 0
    x_t = t_tokens[..., None] * noise + (1 - t_tokens[..., None]) * actions
    target = noise - actions
    tokens = model.vision(inputs['images'])
    k_cache, v_cache, prefix_mask = model.prefix(tokens, inputs['image_mask'],
                                                 inputs['token_ids'], inputs['token_mask'])
    velocity = model.expert.velocity(x_t, t_tokens, k_cache, v_cache, prefix_mask)
    error = F.mse_loss(velocity.float(), target, reduction='none')
    weight = (~committed).float()[..., None].expand_as(error)
    return (error * weight).sum() / weight.sum()


def train(policy, batches, cfg: TrainConfig, progress=None) -> list:
    """Optimise `policy.model` in place on `batches` (an iterator of (observations, chunks));
    returns the loss of every step."""
    model = policy.model
    rng = np.random.default_rng([cfg.seed, 1])

    def step_loss(step):
        observations, chunks = next(batches)
        return flow_matching_loss(model, model_inputs(policy, observations),
                                  normalised_actions(policy, chunks), rng, cfg.max_delay)
    return optimise(model, cfg, step_loss, progress)
