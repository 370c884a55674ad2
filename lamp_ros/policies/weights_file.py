"""Trained weights from a safetensors file, loaded into a policy's model with strict checks:
missing, unexpected or mis-shaped tensors and non-finite values are refused by name (pi0.5's
`weights.file`, act_small's)."""

from safetensors.torch import load_file
import torch
from torch import nn


def load_weights(model: nn.Module, path: str) -> None:
    """Load safetensors into `model`; missing, extra or mis-shaped tensors are named."""
    try:
        tensors = load_file(path)
    except Exception as exc:  # safetensors raises several types for corrupt files
        raise ValueError(f'weights file {path}: cannot read safetensors ({exc})') from exc
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f'weights file {path}: missing tensors {missing[:5]}, '
                         f'unexpected tensors {extra[:5]}')
    for name, ref in expected.items():
        if tuple(tensors[name].shape) != tuple(ref.shape):
            raise ValueError(f'weights file {path}: tensor {name} has shape '
                             f'{tuple(tensors[name].shape)}, the model needs {tuple(ref.shape)}')
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ValueError(f'weights file {path}: tensor {name} holds NaN or inf')
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()})
