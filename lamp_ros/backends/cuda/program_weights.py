"""The cuda program's weights kept once in the artifact: in weights/<node>.safetensors.

Why: torch.export.save writes every parameter and buffer of the program into the PT2 archive,
and the artifact also holds each model stage's weights as weights/<node>.safetensors (the
canonical, inspectable copy `lamp diff` and the other backends read). For pi05_full that was
gigabytes of program.pt2 beside the safetensors, mostly the same tensors: hashed at every
build and load, read at every load, shipped to every robot twice.

Compile side, `strip`: each program tensor that equals (bit for bit, after the cast to the
program's dtype) the canonical tensor of the same stage and name is replaced, before the save,
by a tensor of its shape and dtype on the `meta` device: torch.export.save writes no bytes for
it, torch.export.load gives it back as such. (A one-element tensor expanded to the shape also
saves as one element on the CPU, but a GPU tensor is copied to the host dense first, so it came
back at full size.) Tensors the cuda lowering made or changed (FP8 codes, transposed layouts,
folded tables) stay in the archive. The stripped names go into plan.json (the group's
`canonical_weights`).

Run side, `bind`: after torch.export.load, each stripped name gets its tensor from the
safetensors file, cast to the program's dtype, on the device. A stripped name the file does not
hold, or holds in another shape, and a placeholder left unbound are refused with the reason
(such a program could not run anyway: torch refuses meta tensors beside real ones).
"""

import os

STAGE_PREFIX = 'stages.'  # group_module's ModuleDict: state keys 'stages.<node>.<name>'


def strip(program, canonical: dict) -> dict:
    """Replace, in `program.state_dict`, every tensor equal to its canonical copy by a
    placeholder on the meta device. canonical: node id -> {name: tensor} (the stage module's
    state_dict, what weights/<node>.safetensors holds). -> {node id: [stripped names]}."""
    import torch
    stripped = {}
    for key, value in list(program.state_dict.items()):
        node, _, name = key.removeprefix(STAGE_PREFIX).partition('.')
        if not key.startswith(STAGE_PREFIX) or name not in canonical.get(node, {}):
            continue
        source = canonical[node][name]
        if tuple(source.shape) != tuple(value.shape) or not torch.equal(
                source.detach().to(value.device, value.dtype), value.detach()):
            continue
        stub = torch.empty(value.shape, dtype=value.dtype, device='meta')
        if isinstance(value, torch.nn.Parameter):
            stub = torch.nn.Parameter(stub, requires_grad=False)
        program.state_dict[key] = stub
        stripped.setdefault(node, []).append(name)
    return {node: sorted(names) for node, names in sorted(stripped.items())}


class WeightsError(ValueError):
    """A stripped program tensor has no matching tensor in its stage's safetensors file."""


def bind(module, stripped: dict, weights_dir: str, device) -> int:
    """Give every stripped name of `module` (the loaded program's GraphModule) its canonical
    tensor from weights_dir/<node>.safetensors, cast to the program's dtype, on `device`.
    -> tensors bound.

    Each stage's file is read whole, then its tensors moved one by one, so the host holds one
    stage at a time (pi05_full's prefix: 4.8 GB). Reading a tensor at a time through safe_open
    held less at the process's peak, but loaded slower (docs/notebook/): a robot's configure
    time was the aim, so the files are read whole."""
    import torch
    from safetensors.torch import load_file  # imports torch: inside, as `import torch` is
    state = module.state_dict(keep_vars=True)
    unknown = [f'{STAGE_PREFIX}{node}.{name}' for node, names in stripped.items()
               for name in names if f'{STAGE_PREFIX}{node}.{name}' not in state]
    if unknown:  # before any file is read: a node of another group has no file here either
        raise WeightsError(f'{unknown[0]}: listed as a canonical weight of the program, but '
                           f'the program has no such tensor ({len(unknown)} such)')
    bound = 0
    for node, names in stripped.items():
        rel = f'weights/{node}.safetensors'
        tensors = load_file(os.path.join(weights_dir, f'{node}.safetensors'))
        for name in names:
            key = f'{STAGE_PREFIX}{node}.{name}'
            if name not in tensors:
                raise WeightsError(f'{rel}: no tensor {name!r}, which the program reads from it')
            current, value = state[key], tensors.pop(name)
            if tuple(value.shape) != tuple(current.shape):
                raise WeightsError(f'{rel}: {name} has shape {tuple(value.shape)}, the program '
                                   f'needs {tuple(current.shape)}')
            owner_path, _, leaf = key.rpartition('.')
            owner = module.get_submodule(owner_path)
            value = value.to(device=device, dtype=current.dtype)
            if leaf in owner._parameters:
                owner._parameters[leaf] = torch.nn.Parameter(value, requires_grad=False)
            elif leaf in owner._buffers:
                owner._buffers[leaf] = value
            else:
                raise WeightsError(f'{key}: neither a parameter nor a buffer of the program')
            bound += 1
    left = [k for k, v in module.state_dict(keep_vars=True).items() if v.is_meta]
    if left:
        raise WeightsError(f'{len(left)} program tensors have no values (archive placeholders '
                           f'the plan does not list as canonical weights), first {left[0]}')
    return bound
