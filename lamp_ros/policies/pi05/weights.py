"""Deterministic weights from seeds, and safetensors save/load with strict checks.

Each model stage (vision, prefix, expert) draws its weights from its own seed, so changing the
seed of one stage changes that stage's weights and nothing else: the artifact diff relies on it.
The scale keeps activations O(1) through the random network (1/sqrt(fan_in) for matrices), so
random-weight outputs are informative for parity checks rather than saturated or vanishing.
"""

from concurrent.futures import ThreadPoolExecutor
import math

from safetensors.torch import save_file
import torch
from torch import nn

from lamp_ros.policies.weights_file import load_weights  # noqa: F401 (re-exported)

STAGES = ('vision', 'prefix', 'expert')


def stage_seeds(seed: int, overrides: dict | None = None) -> dict:
    """Seeds per stage: `seed*10 + index` unless overridden (unknown stage names are errors)."""
    seeds = {name: seed * 10 + i for i, name in enumerate(STAGES)}
    for name, value in (overrides or {}).items():
        if name not in seeds:
            raise ValueError(f'weights.seeds: unknown stage {name!r}; known: {", ".join(STAGES)}')
        seeds[name] = int(value)
    return seeds


@torch.no_grad()
def init_stage(module: nn.Module, seed: int) -> None:
    """Fill every parameter of one stage from a private generator, in sorted name order."""
    gen = torch.Generator(device='cpu').manual_seed(seed)
    for name, param in sorted(module.named_parameters()):
        if param.ndim >= 2:
            fan_in = math.prod(param.shape[1:])
            values = torch.randn(param.shape, generator=gen) / math.sqrt(fan_in)
        elif name.endswith('weight') and _is_layernorm(module, name):
            values = 1.0 + 0.02 * torch.randn(param.shape, generator=gen)
        else:
            values = 0.02 * torch.randn(param.shape, generator=gen)
        param.copy_(values.to(param.dtype))


def _is_layernorm(root: nn.Module, param_name: str) -> bool:
    owner = root.get_submodule(param_name.rsplit('.', 1)[0]) if '.' in param_name else root
    return isinstance(owner, nn.LayerNorm)


def init_weights(model: nn.Module, seed: int, overrides: dict | None = None) -> dict:
    """Initialise `model.vision`, `model.prefix`, `model.expert`; return the seeds used.

    The stages fill on threads of their own: each draws from its own generator in its own order, so
    the values are those of one stage after another, bit for bit, and torch's CPU `randn` (one core
    per generator, tens of seconds for the full policy's 3.35 G weights) releases the GIL while it
    draws."""
    seeds = stage_seeds(seed, overrides)
    with ThreadPoolExecutor(max_workers=len(STAGES)) as pool:
        for done in [pool.submit(init_stage, getattr(model, name), seeds[name])
                     for name in STAGES]:
            done.result()  # re-raises a stage's error here
    return seeds


def save_weights(model: nn.Module, path: str, metadata: dict | None = None) -> None:
    """Write the state dict as safetensors (contiguous copies; no pickles)."""
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, path, metadata={k: str(v) for k, v in (metadata or {}).items()})
