"""Marking pipeline stages in policy code: a decorator that records, and changes nothing.

`@stage(...)` attaches a `StageSpec` to a method; calling the method is unchanged. The tracer
finds marked methods on the objects it is given and wraps them for one run. `model_stage` builds
the method of a model stage from the dotted path of its `nn.Module`, so that the stage is exactly
`module(*tensors)`: what torch.export captures is then what the stage computes.
"""

from dataclasses import dataclass
import operator
from typing import Callable

KINDS = ('host', 'preprocess', 'model', 'postprocess', 'stateful')


@dataclass(frozen=True)
class StageSpec:
    """What the tracer needs to know about a stage beyond its arguments and results."""

    op: str
    kind: str
    outputs: tuple
    attrs: Callable | None = None  # obj -> JSON-ready dict of the parameters the op runs with
    key: str | None = None         # argument that tells calls of the same stage apart
    module: str | None = None      # dotted attribute path of the nn.Module (model stages)
    state: str | None = None       # key in `obj.state` of the stage's episode state


def stage(op: str, kind: str, outputs=('out',), attrs=None, key=None, state=None):
    """Mark a method as the pipeline stage `op` of `kind` with named `outputs`."""
    if kind not in KINDS:
        raise ValueError(f'stage {op}: kind {kind!r} not in {KINDS}')
    if kind == 'model':
        raise ValueError(f"stage {op}: a model stage is model_stage({op!r}, 'attribute.path'), "
                         "the nn.Module the compiler exports; @stage marks host stages")
    if kind == 'stateful' and not state:
        raise ValueError(f'stage {op}: a stateful stage names its state (state=...)')

    def mark(fn):
        fn.__lamp_stage__ = StageSpec(op, kind, tuple(outputs), attrs, key, None, state)
        return fn
    return mark


def module_device(module):
    """Where a module's tensors live: its first parameter's device, else its first buffer's,
    else the CPU (a stage without weights, e.g. a fixed resize or a softmax, is a model stage
    too)."""
    import torch
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device('cpu')


def model_stage(op: str, module: str, outputs=('out',)):
    """A method that runs `self.<module>(*args)` on tensors, marked as model stage `op`."""
    get_module = operator.attrgetter(module)

    def run(self, *args):
        import torch  # model stages only exist on the compile side and in the eager reference
        mod = get_module(self)
        device = module_device(mod)
        tensors = [a if isinstance(a, torch.Tensor) else torch.as_tensor(a, device=device)
                   for a in args]
        with torch.inference_mode():
            return mod(*tensors)

    run.__name__ = op
    run.__qualname__ = op
    run.__lamp_stage__ = StageSpec(op, 'model', tuple(outputs), None, None, module, None)
    return run


def as_numpy(x):
    """A model stage's result as the numpy array host glue computes on: in the eager policy it
    is a torch tensor (on any device; fp16 and bf16, which numpy lacks or mishandles, widen to
    float32), in the compiled pipeline already numpy. Anything else goes through np.asarray.
    Imports no torch, so glue may call it."""
    import numpy as np
    if hasattr(x, 'detach'):
        x = x.detach().cpu()
        if x.is_floating_point() and x.element_size() < 4:
            x = x.float()
        return x.numpy()
    return np.asarray(x)
