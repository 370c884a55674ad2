"""A checkpoint's tensors into lamp's Pi05Model: one tensor at a time, checked, never the lm_heads.

The model is built on the meta device, cast there, and then given storage once; each tensor is
read from the safetensors file (whose header safetensors itself validated when the checkpoint
was opened) with one positioned read, checked (its shape against the model the other tensors
describe, every value finite) and copied into its parameter, so the host holds the model plus
one tensor, not two copies of the checkpoint. Not through the memory map: every page of a
mapped 9 GB file that was touched counts in the process's resident memory.

The model has one dtype (the spec's `policy.options.dtype`, by default the one most weights
are stored in): a tensor stored in another is cast (LeRobot's bf16 mode keeps the vision tower
and the norms in fp32), and the provenance says how many were.
"""

import json
import os
import struct

import torch

from lamp_ros.policies.pi05.checkpoint.reader import Checkpoint, CheckpointError
from lamp_ros.policies.pi05.model import Pi05Model

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
STORED = {'F32': torch.float32, 'BF16': torch.bfloat16, 'F16': torch.float16}


class TensorFile:
    """Positioned reads of single tensors from a safetensors file."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        (size,) = struct.unpack('<Q', os.pread(self.fd, 8, 0))
        self.entries = json.loads(os.pread(self.fd, size, 8))
        self.base = 8 + size

    def read(self, name: str) -> torch.Tensor:
        entry = self.entries[name]
        if entry['dtype'] not in STORED:
            raise CheckpointError(f'{self.path}: tensor {name} is {entry["dtype"]}, not a float '
                                  'type lamp loads')
        start, end = entry['data_offsets']
        buffer = bytearray(end - start)
        if os.preadv(self.fd, [buffer], self.base + start) != len(buffer):
            raise CheckpointError(f'{self.path}: tensor {name} is cut short (truncated file)')
        return torch.frombuffer(buffer, dtype=STORED[entry['dtype']]).reshape(entry['shape'])

    def close(self) -> None:
        os.close(self.fd)


@torch.no_grad()
def load_model(ckpt: Checkpoint, device: str = 'cpu', dtype: str | None = None) -> Pi05Model:
    """The checkpoint's Pi05Model on `device` in `dtype` (default: as stored)."""
    torch_dtype = DTYPES[dtype or ckpt.config.dtype]
    with torch.device('meta'):
        model = Pi05Model(ckpt.config).to(torch_dtype)
    model = model.to_empty(device=device)
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
        file = TensorFile(path)
    except (OSError, ValueError, struct.error) as exc:
        raise CheckpointError(f'{path}: cannot read ({exc})') from exc
    try:
        for name, param in params.items():
            source = ckpt.sources[name]
            tensor = file.read(source)
            expected = tuple(param.shape)
            if tuple(tensor.shape) != expected:
                raise CheckpointError(f'{path}: tensor {source} has shape '
                                      f'{tuple(tensor.shape)}; the model the other tensors '
                                      f'describe needs {expected} for {name}')
            if not torch.isfinite(tensor).all():
                raise CheckpointError(f'{path}: tensor {source} has non-finite values')
            param.copy_(tensor.to(device=device, dtype=torch_dtype))
            del tensor
    finally:
        file.close()
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
