"""Backends plug in by file name: `get_backend('onnxruntime')` imports `backends/onnxrt.py`.

Each backend module has a compile side (`supports`, `compile`; may import torch, onnx,
tensorrt inside the function) and a run side (`load` -> Runner), which imports only what running
needs. Loading a backend to run never pulls in torch unless the backend runs on torch.
"""

import importlib

MODULES = {'host': 'host', 'onnxruntime': 'onnxrt', 'tensorrt': 'trt', 'cuda': 'cuda'}


def get_backend(name: str):
    """The backend module for a backend name from the spec/plan."""
    if name not in MODULES:
        raise ValueError(f'backend: unknown {name!r}; known: {", ".join(MODULES)}')
    return importlib.import_module(f'lamp_ros.backends.{MODULES[name]}')
