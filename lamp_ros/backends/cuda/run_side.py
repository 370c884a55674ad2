"""The cuda backend's run side: the group's exported program replayed as CUDA graphs.

It needs torch with CUDA on the robot; CPU artifacts never load it. `load` reads the PT2 archive
the compile side wrote (compile_side.py; its schema's type hints resolved as program_load.py does),
after importing kernels/operators/, which registers the `lamp::` operators a policy's lowering
may have put in it, and binds the weights the build left out of it from
weights/<node>.safetensors (the checksummed canonical copy; program_weights.py).

Why CUDA graphs with the transfers in them: static input buffers are allocated once, the
program warmed up, and the group captured with its inputs' copies from pinned host buffers and
its outputs' copies to pinned host buffers. A run fills the pinned inputs (numpy, on the CPU),
replays, waits once, and reads the pinned outputs: no pageable copy that blocks the CPU per
input, no launch outside the graphs.

Two graphs sharing one memory pool when the group's first stage reads only inputs of its own
(graph_phases.py; a vision encoder and its pixels' copy, then the rest), so that the runtime can
`start` the first while its host stages still run (runtime/schedule.py) and `finish` with the
rest; `run` does both. Stages the spec names in `fusion.side_stream` are captured from a second
stream (stage_streams.py), so that they run beside the stages they do not wait on. With prompt
lengths (text_lengths.py) the graph after the first stage is captured once per length.

AOTInductor packages would be the natural format but crashed at load on the GPU image this
backend was built on, hence the exported program + CUDA graph.
"""

import os

import numpy as np

from lamp_ros.artifact.manifest import ArtifactError
from lamp_ros.backends import text_lengths
from lamp_ros.backends.cuda import graph_phases, program_weights
from lamp_ros.backends.cuda.program_load import load_program
from lamp_ros.backends.cuda.torch_cuda import torch_cuda


class HostInputs:
    """The group's inputs on the host side of the graph's copies: one buffer per input (pinned
    memory on the GPU machine), filled from the feeds before each replay.

    An input numpy can hold (the pixels, token ids, masks) is filled through a numpy view of its
    buffer: one thread's memcpy. torch's `copy_` spreads a copy this large (the pixels: 451,584
    bytes) over its CPU thread pool, and waking that pool cost several times the numpy copy's
    time a call, more still at the tail (side by side: docs/notebook/). bf16 inputs (the noise,
    the state; a few KB) have no numpy type and are cast by torch. A feed of another kind (float
    pixels for a uint8 input) is refused, naming the input, instead of cast. A camera frame
    (`frame` in its spec: the device letterbox's input) is flat uint8 bytes of any count up to
    its buffer's, copied to the buffer's start (its tables read no further), or None for an
    absent camera (its tables read nothing; the buffer keeps what it held)."""

    def __init__(self, torch, names, specs, pin_memory: bool):
        self.names = tuple(names)
        self.torch = torch
        self.buffers = [torch.zeros(s['shape'], dtype=getattr(torch, s['dtype']),
                                    pin_memory=pin_memory) for s in specs]
        self.views = [None if b.dtype == torch.bfloat16 else b.numpy() for b in self.buffers]
        self.frames = [bool(s.get('frame')) for s in specs]

    def fill(self, feeds: dict, positions=None) -> None:
        """Copy feeds into the buffers: all of them, or those at `positions`."""
        for i in range(len(self.names)) if positions is None else positions:
            name, buffer, view = self.names[i], self.buffers[i], self.views[i]
            if self.frames[i]:
                self._fill_frame(name, view, feeds[name])
                continue
            value = np.asarray(feeds[name])
            if value.shape != tuple(buffer.shape):
                raise ValueError(f'{name}: shape {value.shape}, the captured graph needs '
                                 f'{tuple(buffer.shape)}')
            if view is None:
                if value.dtype.kind != 'f':
                    raise ValueError(f'{name}: {value.dtype} values for a bfloat16 input')
                buffer.copy_(self.torch.from_numpy(np.require(value, requirements='C')))
            elif not np.can_cast(value.dtype, view.dtype, 'same_kind'):
                raise ValueError(f'{name}: {value.dtype} values for a {view.dtype} input')
            else:
                np.copyto(view, value, casting='same_kind')

    @staticmethod
    def _fill_frame(name, view, frame) -> None:
        if frame is None:
            return
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 1 or frame.size > view.size:
            raise ValueError(f'{name}: a camera frame must be flat uint8 bytes, at most '
                             f'{view.size} (its buffer), got {frame.dtype} {frame.shape}')
        view[:frame.size] = frame


class CudaGraphRunner:
    """Static buffers + the group captured as CUDA graphs: one, or two (`phases`).

    `first_stage_inputs` (the group's first stage's input values; `load` passes them) lets
    the first stage be captured apart when it reads nothing else (graph_phases.split); None
    captures one graph. `early_inputs` names what `start` copies; `phases` is the split's
    summary, or None.

    A group built with prompt lengths (`text`, backends/text_lengths.py) has the graph after
    the first stage (or its one graph) captured once for each length, all in one memory pool
    (one of them runs at a time); `finish` replays the shortest that holds the feeds' valid
    tokens and records it in `last_text_length`.

    `side_stages` (default: the plan's, from the spec's `fusion.side_stream`) are captured
    from a second stream (stage_streams.py), so the graph's edges are the program's data
    dependencies between them and the other stages; `side_priority` is that stream's CUDA
    priority (lower is more urgent, 0 the default). High by default: the graph ran a little
    faster at -1 than at 0, and either faster than on one stream (docs/notebook/)."""

    warmup_runs = 1  # uncaptured runs of the program per prompt length before the capture:
    # one does the lazy set-ups (libraries' handles, kernel loads, the allocator's blocks),
    # which torch's capture (its 'global' error mode) refuses rather than records; each run of
    # pi05_full's program through the stream interpreter costs about a second of a robot's
    # configure. There were two; one has been enough for the tiny and full builds' parity.

    def __init__(self, group, root: str, device: str, side_stages=None,
                 side_priority: int = -1, first_stage_inputs=None):
        torch = torch_cuda()
        import lamp_ros.kernels.operators  # noqa: F401  (registers the lamp:: operators)
        from lamp_ros.backends.cuda import stage_streams
        self.torch = torch
        torch.backends.cudnn.allow_tf32 = False  # fp32 groups keep fp32 parity
        torch.backends.cuda.matmul.allow_tf32 = False
        meta = group.build
        program = load_program(os.path.join(root, meta['program']))
        self.module = program.module()
        self.text = text_lengths.TextAxis.from_dict(meta['text']) if meta.get('text') else None
        side = tuple(group.side_stages if side_stages is None else side_stages)
        if self.text is not None:
            graph_phases.defer_size_reads(self.module.graph)
            if not side:  # else stage_streams.prepare regenerates the code after its rewrite
                self.module.recompile()
        self._bind_weights(group, root, device)
        self.gemm_algorithms = algorithm_status(meta.get('cublaslt'), device)
        self.stream = torch.cuda.Stream(device)
        self.program = self.module  # what the warm-up and the capture call
        self.streams = None         # StreamSchedule.summary() when side stages are on
        if side:
            unknown = sorted(set(side) - set(group.nodes))
            if unknown:
                raise ValueError(f'side stages {unknown} are not stages of group '
                                 f'{group.name} ({", ".join(group.nodes)})')
            plan = stage_streams.prepare(self.module, side)
            self.side_stream = torch.cuda.Stream(device, priority=side_priority)
            self.program = stage_streams.StreamInterpreter(self.module, plan,
                                                           (self.stream, self.side_stream))
            self.streams = {**plan.summary(), 'side_priority': side_priority}
        self.inputs, self.outputs = tuple(group.inputs), tuple(group.outputs)
        self.split = None  # graph_phases.PhaseSplit when the first stage is captured apart
        if first_stage_inputs is not None:
            self.split = graph_phases.split(
                self.module.graph, group.nodes[0],
                [self.inputs.index(v) for v in first_stage_inputs if v in self.inputs],
                signalled=plan.signalled if side else ())
        specs = [meta['inputs'][name] for name in self.inputs]  # JSON key order is not ours
        self.static_in = [torch.zeros(s['shape'], dtype=getattr(torch, s['dtype']),
                                      device=device) for s in specs]
        self.host_in = HostInputs(torch, self.inputs, specs, pin_memory=True)
        self.lengths = self.text.lengths if self.text is not None else (None,)
        shapes = {}
        with torch.no_grad(), torch.cuda.stream(self.stream):
            for length in self.lengths:  # warm-up outside capture (lazy library set-up,
                for _ in range(self.warmup_runs):  # kernel loads, the allocator's blocks)
                    out = self.program(*self.at_length(self.static_in, length))
                outs = out if isinstance(out, (tuple, list)) else (out,)
                shapes[length] = [tuple(o.shape) for o in outs]
        torch.cuda.synchronize(device)
        if len({tuple(v) for v in shapes.values()}) > 1:  # one set of output buffers for all
            raise ValueError(f'{group.name}: the outputs change shape with the prompt length '
                             f'({shapes}); its graphs cannot share output buffers')
        # float outputs come back as float32 (what the host stages read), others as they are
        self.host_out = [torch.empty(o.shape, pin_memory=True,
                                     dtype=torch.float32 if o.is_floating_point() else o.dtype)
                         for o in outs]
        self.early = self.split.early if self.split else ()
        self.late = self.split.late if self.split else tuple(range(len(self.inputs)))
        self.first_graph, self.rest_graphs = self._capture()
        self.last_text_length = self.lengths[-1]
        self.early_inputs = tuple(self.inputs[i] for i in self.early)  # runtime/schedule.py
        self.phases = self.split.summary(self.inputs) if self.split else None
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        self.started = False
        self.last_device_ms = None  # CUDA-event time of the last replay (the profiler reads it)

    def at_length(self, values, length):
        """`values` (one per input) with the text inputs cut to `length` prompt tokens (None:
        as they are), as the graph of that length reads them."""
        return list(values) if length is None else self.text.cut(self.inputs, values, length)

    def _capture(self) -> tuple:
        """-> (the first stage's graph or None, {prompt length or None: the graph of the rest}).

        Without a split, each graph is the whole group (copies in, program, copies out); with
        one, the first stage with its inputs' copies, then the rest. All share one memory pool:
        only one graph of the rest runs after the first, so they may reuse each other's
        intermediates but not the first stage's outputs, which the PhasedRun holds."""
        torch = self.torch

        def copy_in(positions):
            for i in positions:
                self.static_in[i].copy_(self.host_in.buffers[i], non_blocking=True)

        def copy_out(out):
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for host, value in zip(self.host_out, outs):
                host.copy_(value.to(host.dtype), non_blocking=True)

        pool = torch.cuda.graph_pool_handle()
        rest = {}
        if self.split is None:
            for length in self.lengths:
                graph = rest[length] = torch.cuda.CUDAGraph()
                with torch.no_grad(), torch.cuda.graph(graph, pool=pool, stream=self.stream):
                    copy_in(self.late)  # every input
                    copy_out(self.program(*self.at_length(self.static_in, length)))
            return None, rest
        streams = self.program if self.program is not self.module else None
        run = graph_phases.PhasedRun(self.module, self.split, streams)
        first = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(first, pool=pool, stream=self.stream):
            copy_in(self.early)
            run.first(*self.static_in)
        for length in self.lengths:
            cut = self.at_length(self.static_in, length)
            graph = rest[length] = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(graph, pool=pool, stream=self.stream):
                copy_in(self.late)
                copy_out(run.second({i: cut[i] for i in self.late}))
        return first, rest

    @property
    def graphs(self) -> tuple:
        """The graphs one inference replays at the last prompt length, in order."""
        return ((self.first_graph,) if self.first_graph is not None else ()) + (
            self.rest_graphs[self.last_text_length],)

    def _bind_weights(self, group, root, device):
        """The program tensors the build left out of the archive (program_weights.py), from
        weights/<node>.safetensors; an archive built before that holds them all."""
        stripped = group.build.get('canonical_weights') or {}
        try:
            program_weights.bind(self.module, stripped, os.path.join(root, 'weights'), device)
        except program_weights.WeightsError as exc:
            raise ArtifactError(f'group {group.name}: {exc}') from exc

    def start(self, feeds: dict) -> None:
        """Fill the first stage's inputs and launch its graph; returns at once. With one graph
        only the start of the GPU time is marked."""
        if self.started:  # a start without its finish (a host stage failed in between):
            self.torch.cuda.current_stream().synchronize()  # its copies read these buffers
        self.host_in.fill(feeds, self.early)
        self.events[0].record()
        if self.first_graph is not None:
            self.first_graph.replay()
        self.started = True

    def finish(self, feeds: dict) -> dict:
        """Fill the other inputs, launch the (rest of the) group at the shortest prompt length
        that holds the valid tokens, wait, read the outputs."""
        length = self.lengths[-1]
        if self.text is not None:
            length = self.text.length_for(feeds[self.text.mask])
        if not self.started:
            self.start(feeds)
        self.host_in.fill(feeds, self.late)  # the graph copies them to the GPU
        self.rest_graphs[length].replay()
        self.last_text_length = length
        self.events[1].record()
        self.events[1].synchronize()
        self.started = False
        self.last_device_ms = self.events[0].elapsed_time(self.events[1])
        # copies: the pinned buffers are the next replay's destination
        return {name: host.numpy().copy() for name, host in zip(self.outputs, self.host_out)}

    def run(self, feeds: dict, state=None, out=None) -> dict:
        self.start(feeds)
        return self.finish(feeds)


def algorithm_status(built: dict | None, device) -> str | None:
    """Whether the program's stored cuBLASLt algorithms (plan.json `build.cublaslt`) run here:
    only with the cuBLASLt version and on the GPU they were measured on; elsewhere each such
    GEMM is torch's op (`lamp::lt_linear`), the same product at the speed torch gets. None
    when the build stored none."""
    if not built:
        return None
    from lamp_ros.kernels import cublaslt
    try:
        here = cublaslt.identity(device)
    except cublaslt.CublasLtError as exc:
        return f'not used: {exc} (torch\'s GEMMs run instead)'
    if here == {'cublaslt': built['cublaslt'], 'gpu': built['gpu']}:
        return f'stored: {built["linears"]} linears'
    return (f'not used: measured with cuBLASLt {built["cublaslt"]} on {built["gpu"]}, here '
            f'cuBLASLt {here["cublaslt"]} on {here["gpu"]} (torch\'s GEMMs run instead)')


def load(group, ctx):
    first = ctx.graph.node(group.nodes[0])
    return CudaGraphRunner(group, ctx.root, ctx.device, first_stage_inputs=first.inputs)
