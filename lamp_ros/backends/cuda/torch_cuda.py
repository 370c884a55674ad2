"""torch with a CUDA device, which both sides of the cuda backend need before anything else.

The compile side exports on the GPU and the run side replays there. Where torch or its GPU is
missing, either says so as BackendUnavailable (the compiler and the runtime name the backend
and the reason) rather than failing later on an ImportError or a CUDA call. Its own module so
that the compile side and the run side share it without importing each other.
"""

from lamp_ros.backends.base import BackendUnavailable


def torch_cuda():
    """The torch module, once it is known to have a CUDA device."""
    try:
        import torch
    except ImportError as exc:
        raise BackendUnavailable(f'the cuda backend needs torch ({exc})') from exc
    if not torch.cuda.is_available():
        raise BackendUnavailable('torch reports no CUDA device')
    return torch
