"""`lamp::letterbox`: the cameras' resize-with-pad from their frames' bytes (ops/letterbox.py).

The GPU makes the pixels from the raw frames, so the host copies bytes instead of resizing
(triton_kernels.py on CUDA; on the CPU ops/letterbox.py's numpy definition, camera by camera).
"""

import torch

from lamp_ros.kernels.operators.lazy_triton import load_triton_kernels as _triton


@torch.library.custom_op('lamp::letterbox', mutates_args=())
def letterbox(frames: list[torch.Tensor], geometry: torch.Tensor) -> torch.Tensor:
    """One flat uint8 frame per camera (only the bytes its tables name are read) and the
    tables (1, cams, 2, size, 4) int32 -> the letterboxed pixels (1, cams, size, size, 3)
    uint8, the bytes OpenCV's INTER_LINEAR_EXACT resize-with-pad makes on the host."""
    if geometry.is_cuda:
        return _triton().letterbox(frames, geometry)
    return letterbox_reference(frames, geometry)


def letterbox_reference(frames, geometry):
    """The CPU implementation: ops/letterbox.py's definition (numpy, int64), camera by camera."""
    from lamp_ros.ops.letterbox import letterbox_reference as one_camera
    tables = geometry.cpu().numpy()
    return torch.stack([torch.from_numpy(one_camera(frame.cpu().numpy(), tables[0, i]))
                        for i, frame in enumerate(frames)])[None].to(geometry.device)


@letterbox.register_fake
def _(frames, geometry):
    size = geometry.shape[-2]
    return torch.empty((1, len(frames), size, size, 3), dtype=torch.uint8,
                       device=geometry.device)
