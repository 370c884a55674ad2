"""The cuda backend's compile side: a group's model stages, lowered and exported, as a PT2 archive.

The stages are cast to the group precision and moved to the GPU, then handed to the policy's
cuda lowering (`ctx.lowering`, which the compiler takes from the policy's registered Rewrites,
compiler/rewrites.py; pi0.5's is lamp_ros/policies/pi05/cuda/lowering.py): it switches them
onto lamp_ros's kernels where the policy's passes put them in a form that has them, each choice
the build GPU timed recorded in `tiles`. This module knows no model: without a lowering the
stages are exported as traced. The group is then captured with torch.export and saved as a PT2
archive (graph JSON + raw weight bytes of the tensors the lowering made or changed; the example
inputs are dropped so the archive holds no pickled objects). It must be built on a CUDA
machine: export records the device.

plan.json gets what the run side (run_side.py) and a reader need: the inputs' dtypes and shapes,
the prompt lengths (text_lengths.py), the two-stream schedule (stage_streams.py), the GEMMs on
stored cuBLASLt algorithms, and the program tensors left out of the archive (program_weights.py).
torch is imported inside the functions, so that importing the backend imports no torch.
"""

import os

import numpy as np

from lamp_ros.backends import text_lengths
from lamp_ros.backends.base import GroupBuild
from lamp_ros.backends.cuda import graph_phases, program_weights
from lamp_ros.backends.cuda.torch_cuda import torch_cuda
from lamp_ros.backends.group_module import group_module

TORCH_DTYPES = {'fp32': 'float32', 'bf16': 'bfloat16', 'fp16': 'float16'}


def _cast_inputs(torch, tensors, dtype):
    return [t.to(dtype) if t.is_floating_point() else t for t in tensors]


def compile(ctx) -> GroupBuild:
    import copy
    torch = torch_cuda()
    dtype = getattr(torch, TORCH_DTYPES[ctx.group.precision])
    from lamp_ros.kernels import tuning
    modules = {n: copy.deepcopy(m).to('cuda', dtype) for n, m in ctx.modules.items()
               if n in ctx.group.nodes}
    axis = text_lengths.text_axis(ctx.graph, ctx.group, ctx.example, ctx.text_lengths)
    tiles = {}
    kernels = ctx.lowering(modules, tiles, axis.lengths if axis else (), ctx.options,
                           ctx.measure_tiles) if ctx.lowering else {}
    if kernels:
        ctx.say(f'{ctx.group.name}: lamp kernels ' +
                ', '.join(f'{k} x{v}' for k, v in sorted(kernels.items())))
    from lamp_ros.kernels.linears import fp8_off_kernel  # torch: the build side only
    imitated = fp8_off_kernel(modules)
    if imitated:
        raise ValueError(f'{ctx.group.name}: {imitated[0]} is an FP8 linear that the cuda '
                         f'lowering left off its FP8 kernel (group precision '
                         f'{ctx.group.precision}; the kernel takes bf16 stages), so it would '
                         'run as float math imitating FP8 numbers; the build refuses rather '
                         'than record it as FP8' +
                         (f' ({len(imitated) - 1} more)' if len(imitated) > 1 else ''))
    module = group_module(ctx.graph, ctx.group, modules)
    args, io = group_inputs(torch, ctx.graph, ctx.group, ctx.example, dtype)
    ctx.say(f'{ctx.group.name}: torch.export on cuda ({ctx.group.precision})' +
            (f', prompt lengths {list(axis.lengths)}' if axis else ''))
    with torch.no_grad():
        program = torch.export.export(
            module, tuple(args), strict=False,
            dynamic_shapes=text_lengths.dynamic_shapes(axis, ctx.group.inputs) if axis else None)
    if axis:
        shapes = text_lengths.program_output_shapes(program)
        text_lengths.refuse_length_dependent_outputs(ctx.group.name,
                                                     dict(zip(ctx.group.outputs, shapes)))
    program._example_inputs = None  # keep the archive free of pickled objects
    canonical = program_weights.strip(
        program, {n: m.state_dict() for n, m in ctx.modules.items() if n in ctx.group.nodes})
    ctx.say(f'{ctx.group.name}: {sum(map(len, canonical.values()))} of '
            f'{len(program.state_dict)} program tensors read from weights/*.safetensors at load')
    streams = _stream_schedule(ctx.group, program)
    rel = f'groups/{ctx.group.name}/program.pt2'
    os.makedirs(os.path.join(ctx.root, os.path.dirname(rel)), exist_ok=True)
    torch.export.save(program, os.path.join(ctx.root, rel))
    choices, tuning_evidence = tuning.split_record(tiles)
    return GroupBuild(files=(rel,), metadata={'program': rel, 'inputs': io,
                                              'torch': torch.__version__, 'kernels': kernels,
                                              'tiles': choices, 'streams': streams,
                                              'text': axis.to_dict() if axis else None,
                                              'cublaslt': _stored_algorithms(modules),
                                              'canonical_weights': canonical},
                      evidence={'tuning': tuning_evidence})


def group_inputs(torch, graph, group, example: dict, dtype, device: str = 'cuda') -> tuple:
    """(the group's example inputs on `device`, floats in the group precision; their specs
    as plan.json records them: {value: {dtype, shape, frame (a camera frame's buffer)}})."""
    args = [torch.as_tensor(np.asarray(_host(example[v]))).to(device) for v in group.inputs]
    args = _cast_inputs(torch, args, dtype)
    io = {v: {'dtype': str(a.dtype).removeprefix('torch.'), 'shape': list(a.shape)}
          for v, a in zip(group.inputs, args)}
    for v in _frame_inputs(graph, group):
        io[v]['frame'] = True
    return args, io


def _frame_inputs(graph, group) -> tuple:
    """The group's inputs that are camera frames in fixed-size buffers (the vision stage's,
    compiler/device_letterbox.py): HostInputs copies a frame of any size up to its buffer's."""
    return tuple(v for n in group.nodes
                 for v in graph.node(n).attrs.get('letterbox', {}).get('frames', {})
                 if v in group.inputs)


def _stored_algorithms(modules) -> dict | None:
    """plan.json's record of the GEMMs on stored cuBLASLt algorithms (LtLinear): where they
    were measured (the only library version and GPU they run on) and, per row count, how many
    linears have one; None without any."""
    from lamp_ros.kernels.linears import LtLinear
    stored = [m for stage in modules.values() for m in stage.modules()
              if isinstance(m, LtLinear)]
    if not stored:
        return None
    rows = {}
    for m in stored:
        for r in m.rows:
            rows[str(r)] = rows.get(str(r), 0) + 1
    return {'cublaslt': stored[0].cublaslt, 'gpu': stored[0].gpu, 'linears': len(stored),
            'rows': dict(sorted(rows.items(), key=lambda kv: int(kv[0])))}


def _stream_schedule(group, program) -> dict | None:
    """plan.json's view of the two-stream capture the runner will make of this program (the
    same preparation on a copy of its graph), or None with no side stages; a side stage with no
    operator in the program is refused at build rather than captured as an empty stream."""
    if not group.side_stages:
        return None
    from lamp_ros.backends.cuda import stage_streams
    module = program.module()
    graph_phases.defer_size_reads(module.graph)  # as the runner prepares it (prepare recompiles)
    return stage_streams.prepare(module, group.side_stages).summary()


def _host(value):
    if type(value).__module__.startswith('torch'):
        return value.detach().float().cpu().numpy() if value.is_floating_point() \
            else value.detach().cpu().numpy()
    return value
