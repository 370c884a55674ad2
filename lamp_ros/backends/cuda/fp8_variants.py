"""The cuda backend's side of a precision plan (compiler/precision_modules.py): a group's stage
modules run eagerly with any of their linears in FP8, as the runner of a group not built yet.

A plan measures, for every candidate linear, the action error of the group with that linear
alone in FP8, and the time it saves. A build per variant (torch.export, the kernels' tuning, a
CUDA-graph capture: minutes for a full-size policy) is far too slow for that, so the variants
run eagerly: one copy of the group's stages in the group precision on the build GPU, in which a
candidate is swapped for its `Fp8Linear` on the FP8 kernel (torch._scaled_mm, the numbers the
artifact will compute) and back. The reference is the same copy with nothing swapped, so the
error measured is the FP8's alone, not the (larger) difference between eager and compiled
code. Each `Fp8Linear` is quantised from the compiler's float32 weights, exactly as `apply`
makes it for the build, so the plan measures the codes the artifact gets.

A candidate is every plain `nn.Linear` of the stages (subclasses have forms of their own) that
an inference calls. Its time is measured in a CUDA graph at the rows it ran at in the
calibration run: the group-precision linear against its FP8 form, the FP8 one including the
quantisation of its input rows (the policy's lowering fuses that into a norm or an activation
where it can; it also tunes the bf16 GEMMs, so a small gain timed alone may not survive the
build: MIN_SAVING). The FP8 GEMM sums in
cuBLASLt's fast mode where K is at most FAST_ACCUMULATION_MAX_K (pi0.5's hand pass,
fp8_prefix_mlp, measured fast sums to cost little error there and to double it at K = 16384).
"""

import copy
from contextlib import contextmanager

import numpy as np

from lamp_ros.backends.cuda.compile_side import group_inputs, TORCH_DTYPES
from lamp_ros.backends.cuda.run_side import HostInputs
from lamp_ros.backends.group_module import group_module

FAST_ACCUMULATION_MAX_K = 4096
# The share of its bf16 time a linear must save in FP8, timed alone, to be a candidate. The bf16
# GEMM the build runs is faster than the one timed here (the lowering gives it a tuned cuBLASLt
# algorithm, a weight layout, epilogues), and the FP8 one pays for quantising its input rows,
# so a small gain timed alone need not survive in the artifact. On an H200
# (bench/results/precision_gpu_h200/) the prefix's q/k/v, 4% faster alone, made the artifact
# slower (its plan with all 17 in FP8 took 12.55 ms, with 14 of them 12.45 ms), while its MLP
# GEMMs (35% and 43% faster alone) saved 1.9 ms of 14.5.
MIN_SAVING = 0.10


class Fp8Variants:
    """The group's stages (a copy, in the group precision, on `device`) with `lower(names)`
    choosing which linears run in FP8; a runtime runner (`inputs`, `outputs`, `run`)."""

    precision = 'fp8'
    min_saving = MIN_SAVING

    def __init__(self, graph, group, modules: dict, example: dict, device: str = 'cuda'):
        import torch
        from torch import nn
        self.torch, self.device = torch, device
        self.dtype = getattr(torch, TORCH_DTYPES[group.precision])
        self.kernel = device.startswith('cuda') and self.dtype == torch.bfloat16
        if device.startswith('cuda') and not self.kernel:
            raise ValueError(f'precision plan: group {group.name} is {group.precision}; the '
                             'FP8 kernels take bf16 groups (set its stages\' precision: bf16)')
        self.group, self.sources = group, {n: modules[n] for n in group.nodes}
        self.stages = {n: copy.deepcopy(m).to(device, self.dtype)
                       for n, m in self.sources.items()}
        self.module = group_module(graph, group, self.stages)
        self.linears = {f'{node}.{path}': (node, path)
                        for node, stage in self.stages.items()
                        for path, m in stage.named_modules() if type(m) is nn.Linear}
        self.inputs, self.outputs = tuple(group.inputs), tuple(group.outputs)
        _, specs = group_inputs(torch, graph, group, example, self.dtype, device='cpu')
        self.host_in = HostInputs(torch, self.inputs, [specs[v] for v in self.inputs],
                                  pin_memory=False)
        self.lowered = {}   # name -> the swapped-out linear
        self._shapes = {}   # (rows, in, out, bias, fast) -> (group precision ms, FP8 ms)

    # ---- the runner ------------------------------------------------------------------------

    def run(self, feeds: dict, state=None, out=None) -> dict:
        self.host_in.fill(feeds)
        args = [b.to(self.device) for b in self.host_in.buffers]
        args = [a.to(self.dtype) if a.is_floating_point() else a for a in args]
        with self.torch.no_grad():
            outs = self.module(*args)
        return {name: v.float().cpu().numpy() if v.is_floating_point() else v.cpu().numpy()
                for name, v in zip(self.outputs, outs)}

    def timed_on(self) -> dict:
        """Where the timings come from (plan.json records it: the plan is for that GPU)."""
        if not self.device.startswith('cuda'):
            return {'device': self.device}
        return {'gpu': self.torch.cuda.get_device_name(self.device),
                'torch': self.torch.__version__}

    # ---- FP8 linears -----------------------------------------------------------------------

    def fp8_linear(self, name: str, modules: dict | None = None):
        """The candidate's Fp8Linear quantised from the compiler's weights (`modules`: the
        stage modules to read it from; default the group's sources), on no device change."""
        from lamp_ros.kernels.linears import Fp8Linear
        node, path = self.linears[name]
        linear = (modules or self.sources)[node].get_submodule(path)
        return Fp8Linear.from_linear(linear, linear.in_features <= FAST_ACCUMULATION_MAX_K)

    def _swap(self, name: str, module) -> None:
        node, path = self.linears[name]
        self.stages[node].set_submodule(path, module)

    def lower(self, names) -> None:
        """Exactly `names` in FP8 from now on, every other candidate in the group precision."""
        names = set(names)
        unknown = sorted(names - set(self.linears))
        if unknown:
            raise KeyError(f'{self.group.name}: no candidate linear {unknown[0]}')
        for name in sorted(set(self.lowered) - names):
            self._swap(name, self.lowered.pop(name))
        for name in sorted(names - set(self.lowered)):
            node, path = self.linears[name]
            self.lowered[name] = self.stages[node].get_submodule(path)
            fp8 = self.fp8_linear(name).to(self.device, self.dtype)
            if self.kernel:
                fp8.use_kernel()
            self._swap(name, fp8)

    @contextmanager
    def observing(self):
        """Within: every candidate's calls counted and the rows each call read recorded
        -> {name: [rows of each call]}."""
        seen, hooks = {}, []
        for name, (node, path) in self.linears.items():
            linear = self.stages[node].get_submodule(path)

            def hook(module, args, name=name):
                seen.setdefault(name, []).append(args[0].numel() // args[0].shape[-1])
            hooks.append(linear.register_forward_pre_hook(hook))
        try:
            yield seen
        finally:
            for h in hooks:
                h.remove()

    def time_ms(self, name: str, rows: int) -> tuple:
        """(the linear in the group precision, its FP8 form) at `rows`, GPU ms per call, each
        replayed from a CUDA graph (kernels/tuning.py gpu_time_ms); one measurement per shape."""
        from lamp_ros.kernels.tuning import gpu_time_ms
        node, path = self.linears[name]
        linear = self.lowered[name] if name in self.lowered \
            else self.stages[node].get_submodule(path)
        fast = linear.in_features <= FAST_ACCUMULATION_MAX_K
        key = (rows, linear.in_features, linear.out_features, linear.bias is not None, fast)
        if key not in self._shapes:
            if not self.kernel:
                raise RuntimeError(f'{self.group.name}: FP8 timings need the bf16 group on a '
                                   f'CUDA GPU (here {self.group.precision} on {self.device})')
            fp8 = self.fp8_linear(name).to(self.device, self.dtype)
            fp8.use_kernel()
            x = self.torch.randn(rows, linear.in_features, device=self.device,
                                 dtype=self.dtype)
            with self.torch.no_grad():
                self._shapes[key] = (gpu_time_ms(lambda: linear(x)), gpu_time_ms(lambda: fp8(x)))
        return self._shapes[key]

    def apply(self, names, modules: dict) -> dict:
        """Swap `names` for their Fp8Linears in the compiler's stage modules (`modules`, whose
        changed entries become changed copies: a stage no pass rewrote is the eager
        reference's own module, which parity compares against) -> {node: {'fp8_linears': n,
        'parameters_fp8': n}} of the nodes changed."""
        details = {}
        for node in sorted({self.linears[name][0] for name in names}):
            modules[node] = copy.deepcopy(modules[node])
        for name in sorted(names):
            node, path = self.linears[name]
            fp8 = self.fp8_linear(name, modules)
            modules[node].set_submodule(path, fp8)
            d = details.setdefault(node, {'fp8_linears': 0, 'parameters_fp8': 0})
            d['fp8_linears'] += 1
            d['parameters_fp8'] += int(np.prod(fp8.codes.shape))
        return details
