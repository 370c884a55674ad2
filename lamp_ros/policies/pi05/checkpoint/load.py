"""A checkpoint's tensors into lamp's Pi05Model: one tensor at a time, checked, never the lm_heads.

The model is built on the meta device and then given storage once; each tensor is read from the
memory-mapped safetensors file, checked (its shape against the model the other tensors
describe, every value finite) and copied into its parameter, so the host holds the model plus
one tensor, not two copies of the checkpoint. The model has one dtype (the spec's
`policy.options.dtype`, by default the one most weights are stored in): a tensor stored in
another is cast (LeRobot's bf16 mode keeps the vision tower and the norms in fp32), and the
provenance says how many were.
"""

import os

import torch

from lamp_ros.policies.pi05.checkpoint.reader import Checkpoint, CheckpointError
from lamp_ros.policies.pi05.model import Pi05Model

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


@torch.no_grad()
def load_model(ckpt: Checkpoint, device: str = 'cpu', dtype: str | None = None) -> Pi05Model:
    """The checkpoint's Pi05Model on `device` in `dtype` (default: as stored)."""
    from safetensors import safe_open

    torch_dtype = DTYPES[dtype or ckpt.config.dtype]
    with torch.device('meta'):
        model = Pi05Model(ckpt.config)
    model = model.to_empty(device=device).to(torch_dtype)
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(ckpt.sources))
    if missing:
        raise CheckpointError(f'{ckpt.weights_file}: no tensor for {len(missing)} parameters, '
                              f'e.g. {missing[:3]}')
    extra = sorted(set(ckpt.sources) - set(params))
    if extra:
        raise CheckpointError(f'{ckpt.weights_file}: tensors for parameters the model the '
                              f'shapes describe does not have: {extra[:3]}')
    path = os.path.join(ckpt.root, ckpt.weights_file)
    try:
        with safe_open(path, 'pt') as f:
            for name, param in params.items():
                source = ckpt.sources[name]
                tensor = f.get_tensor(source)
                expected = tuple(param.shape)
                if tuple(tensor.shape) != expected:
                    raise CheckpointError(f'{path}: tensor {source} has shape '
                                          f'{tuple(tensor.shape)}; the model the other tensors '
                                          f'describe needs {expected} for {name}')
                if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                    raise CheckpointError(f'{path}: tensor {source} has non-finite values')
                param.copy_(tensor.to(device=device, dtype=torch_dtype))
                del tensor
    except CheckpointError:
        raise
    except Exception as exc:  # a truncated file fails when its data is read
        raise CheckpointError(f'{path}: cannot read tensor data ({exc})') from exc
    return model.eval()


def provenance(ckpt: Checkpoint, dtype: str | None = None) -> dict:
    """What the artifact records of the checkpoint: its format, every file read with its sha256,
    which checkpoint tensor filled which parameter, what was never read, and any cast."""
    model_dtype = dtype or ckpt.config.dtype
    names = {'F32': 'float32', 'BF16': 'bfloat16', 'F16': 'float16'}
    cast = sorted(name for name, src in ckpt.sources.items()
                  if names.get(ckpt.header[src][1]) != model_dtype)
    return {'format': ckpt.format, 'files': ckpt.files, 'weights_file': ckpt.weights_file,
            'stored_dtype': ckpt.dtype, 'model_dtype': model_dtype,
            'cast_tensors': len(cast), 'parameters': ckpt.parameters(),
            'never_read': ckpt.skipped, 'tensors': dict(sorted(ckpt.sources.items())),
            'notes': list(ckpt.notes)}
