"""`Runtime`: the one object the node, replay and benchmarks talk to.

`Runtime.load(path)` opens and verifies the artifact, checks its target against this machine,
allocates the memory plan's arenas and loads every group's runner. A control tick runs the
inference phase (observation -> chunk) only when the chunker asks for a new chunk, then the
tick phase (chunker -> smoother -> clamp). Two execution modes:

- `sync`: inference inside the tick that needs it (simple, deterministic; replay uses it).
- `async`: inference in a worker thread on a snapshot of the inputs; ticks never wait, the
  chunker serves the current plan meanwhile and merges the new chunk when it arrives, dropping
  the actions whose time passed during inference (latency compensation by the chunk's
  observation time).

Either way an inference runs its groups in the order of runtime/schedule.py: a cuda group
captured in two graphs has its first (the vision encoder) launched as soon as the images are
preprocessed, and the prompt and noise stages run while it does (`overlap`, on by default).
"""

from dataclasses import replace
import json
import time

import numpy as np

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import ArtifactError
from lamp_ros.backends import get_backend
from lamp_ros.backends.base import BackendUnavailable, LoadContext
from lamp_ros.observation import validate_observation
from lamp_ros.ops.chunker import ActionChunker, padded_actions
from lamp_ros.runtime.arena import Arena
from lamp_ros.runtime.device import cuda_device_count
from lamp_ros.runtime.profiler import Profiler
from lamp_ros.runtime.rtc_delay import arrival_time, LatencyWindow
from lamp_ros.runtime.schedule import inference_steps
from lamp_ros.runtime.state import StateStore
from lamp_ros.runtime.worker import InferenceResult, InferenceWorker

GPU_TARGETS = ('cuda', 'tensorrt')
EXECUTION_MODES = ('sync', 'async')


OVERRIDABLE = ('chunker', 'smoother', 'clamp')


def default_device(target: str) -> str:
    return 'cuda:0' if target in GPU_TARGETS else 'cpu'


def apply_overrides(artifact, overrides: dict):
    """The artifact with some stateful operators' attrs replaced (the files stay untouched)."""
    if not overrides:
        return artifact
    nodes = []
    for node in artifact.graph.nodes:
        patch = overrides.get(node.op) or {}
        if patch and node.op not in OVERRIDABLE:
            raise ValueError(f'overrides: {node.op} is not overridable ({OVERRIDABLE})')
        built = 'guided' if 'guidance_end' in artifact.graph.inputs else 'trained'
        if (patch.get('rtc') or {}).get('mode', built) != built:
            raise ValueError(f'overrides: chunker rtc mode {patch["rtc"]["mode"]}: this '
                             f'artifact\'s denoise stage was built for rtc mode {built}')
        if patch.get('merge_mode') == 'rtc' and 'delay' not in artifact.graph.inputs:
            raise ValueError('overrides: chunker merge_mode rtc: this artifact\'s denoise '
                             'stage does not take the committed actions; compile its spec '
                             'with control.chunker.merge_mode rtc')
        if node.op == 'chunker' and patch.get('merge_mode', 'rtc') != 'rtc':
            patch = {**patch, 'rtc': None}  # rtc settings belong to merge_mode rtc alone
        nodes.append(replace(node, attrs={**node.attrs, **patch}) if patch else node)
    unknown = set(overrides) - {n.op for n in artifact.graph.nodes}
    if unknown:
        raise ValueError(f'overrides: no node {sorted(unknown)} in the graph')
    return replace(artifact, graph=replace(artifact.graph, nodes=tuple(nodes)))


class Runtime:
    def __init__(self, artifact, device: str, runners: list, state: StateStore, arena: Arena,
                 profiler: Profiler, execution: str = 'sync', worker_factory=None):
        if execution not in EXECUTION_MODES:
            raise ValueError(f'execution: {execution!r} not in {EXECUTION_MODES}')
        self.artifact = artifact
        self.device = device
        self.state = state
        self.arena = arena
        self.profiler = profiler
        self.execution = execution
        abi = artifact.manifest['abi']
        self.camera_slots = tuple(abi['camera_slots'])
        self.joint_names = tuple(abi['joint_names'])
        self.prompt = bool(abi.get('prompt', 'prompt' in artifact.graph.inputs))
        self.camera_sizes = {k: tuple(v) for k, v in abi.get('camera_sizes', {}).items()}
        self.rate_hz = float(abi['rate_hz'])
        self.period = 1.0 / self.rate_hz
        plan, graph = artifact.plan, artifact.graph
        staged = [(g, r, plan.phases[g.nodes[0]]) for g, r in zip(plan.groups, runners)]
        self.inference_runners = [(g, r) for g, r, ph in staged if ph == 'inference']
        self.tick_runners = [(g, r) for g, r, ph in staged if ph == 'tick']
        # runtime/schedule.py: with `overlap` a two-phase group's first phase runs beside the
        # host groups; without it every group runs whole in plan order (A/B, benchmarks)
        self.overlap = True
        self._inference_steps = {overlap: inference_steps(self.inference_runners, overlap)
                                 for overlap in (False, True)}
        self._tick_steps = inference_steps(self.tick_runners, overlap=False)
        chunkers = [n for n in graph.nodes if n.op == 'chunker']
        if chunkers:
            node = chunkers[0]
            port = dict(zip(node.ports, node.inputs))
            self._chunker = (node.id, ActionChunker.from_dict(node.attrs))
            self.chunk_value, self.t_obs_value = port['chunk'], port['t_obs']
        else:
            self._chunker, self.chunk_value, self.t_obs_value = None, None, None
        # real-time chunking (rtc_delay.py): the graph takes the committed actions and delay
        self.rtc = 'delay' in graph.inputs
        self.guided = 'guidance_end' in graph.inputs   # rtc mode guided
        self.latency = LatencyWindow()
        self.last_delay = None      # the delay the last chunk was generated with
        self.last_inferred = False  # an inference started in the last tick
        self.last_merged = None     # the InferenceResult the last tick merged (or that failed)
        self.inference_count = 0    # inferences started this episode (the next one's index)
        self.capture_into = None   # a dict to receive every value of the next sync ticks
        self.inference_errors = 0
        self.last_error = None
        # async: a thread (worker.py); replay passes one that follows a recording's schedule
        self._worker = (worker_factory or InferenceWorker)(self._infer) \
            if execution == 'async' else None

    @classmethod
    def load(cls, path: str, device: str | None = None, execution: str = 'sync',
             profile_window: int = 1000, overrides: dict | None = None,
             threads: int = 0, rate_hz: float | None = None,
             worker_factory=None) -> 'Runtime':
        """Open, verify and load an artifact; refuse with the reason when anything is off.

        overrides: {node id: {attr: value}} for stateful post-processing (chunker, smoother,
        clamp) set by the deployment (node parameters); validated by the operators themselves.
        threads: CPU threads per compiled group (0: the backend's default, all cores); a robot
        leaves a core to its control loop.
        rate_hz: the control rate the ticks come at, when not the artifact's (abi.rate_hz): the
        chunker's step and the deadline of every tick follow it.
        worker_factory: async execution: `factory(infer)` -> the object that runs inferences
        (InferenceWorker's interface); default a thread. Replay passes one that delivers each
        chunk at the tick the recording says it arrived (regress/schedule.py).
        """
        return cls.from_artifact(open_artifact(path), device, execution, profile_window,
                                 overrides, threads, rate_hz, worker_factory=worker_factory)

    @classmethod
    def from_artifact(cls, artifact, device: str | None = None, execution: str = 'sync',
                      profile_window: int = 1000, overrides: dict | None = None,
                      threads: int = 0, rate_hz: float | None = None,
                      runners: dict | None = None, worker_factory=None) -> 'Runtime':
        """`load` for an artifact already opened (artifact/load.py): the compiler runs
        variants of the one it is building (its precision plan) without writing each out.
        `runners`: {group name: a runner to use instead of loading that group's build} (the
        plan's eager variants of a group not built yet, backends/cuda/fp8_variants.py)."""
        if rate_hz is not None:
            if not rate_hz > 0:
                raise ValueError(f'rate_hz: must be > 0, got {rate_hz}')
            artifact = replace(artifact, manifest={
                **artifact.manifest, 'abi': {**artifact.manifest['abi'], 'rate_hz': rate_hz}})
            overrides = {**(overrides or {}),
                         'chunker': {**(overrides or {}).get('chunker', {}), 'dt': 1.0 / rate_hz}}
        artifact = apply_overrides(artifact, overrides or {})
        target = artifact.manifest['target']
        device = device or default_device(target)
        loaded = [g for g in artifact.plan.groups if g.name not in (runners or {})]
        needs_gpu = device.startswith('cuda') or (
            target in GPU_TARGETS and any(g.backend != 'host' for g in loaded))
        if needs_gpu and cuda_device_count() == 0:
            raise ArtifactError(f'target {target!r} (device {device}) needs a CUDA device; '
                                'this machine has none')
        arena = Arena(artifact.memory, artifact.graph.values)
        state = StateStore(arena)
        profiler = Profiler(window=profile_window)
        ctx = LoadContext(artifact.root, artifact.graph, device, artifact.resources, state,
                          arena, profiler, threads)
        given, runners = runners or {}, []
        for group in artifact.plan.groups:
            if group.name in given:
                runners.append(given[group.name])
                continue
            try:
                runners.append(get_backend(group.backend).load(group, ctx))
            except BackendUnavailable as exc:
                raise ArtifactError(f'plan.json group {group.name}: backend {group.backend} '
                                    f'cannot run here: {exc}') from exc
        return cls(artifact, device, runners, state, arena, profiler, execution, worker_factory)

    # ---- identity and episode ----------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.artifact.id

    def reset(self) -> None:
        """New episode: every stateful operator back to its initial state, no pending chunk."""
        if self._worker:
            self._worker.wait_idle(timeout=30)
            self._worker.discard()
        self.state.reset()
        self.inference_count = 0
        self.last_merged = None

    def close(self) -> None:
        if self._worker:
            self._worker.close()

    def discard_inference(self) -> None:
        """Forget an asynchronous inference's result not merged yet (an episode state that
        replay restores was taken with none in flight: runtime/episode_state.py)."""
        if self._worker:
            self._worker.discard()

    def has_plan(self) -> bool:
        if self._chunker is None:
            return True
        return bool(self.state.get(self._chunker[0])['valid'][0])

    def needs_inference(self, t: float) -> bool:
        if self._chunker is None:
            return True
        node_id, chunker = self._chunker
        return chunker.needs_chunk(self.state.get(node_id), t)

    # ---- inputs ------------------------------------------------------------------------------

    def feeds(self, observation, t: float, t_obs: float | None = None, committed=None,
              delay: int | None = None, end: int | None = None) -> dict:
        """Observation + times -> graph input values (validated; errors name the field).
        `committed` ((rows, joints) robot units): for an rtc artifact, the actions to generate
        the chunk around instead of those of the runtime's own plan; `delay` of them committed
        (default: all rows) and, in guided mode, the pull toward them ending at `end` (default:
        all rows). For parity and checks."""
        obs = validate_observation(observation, self.camera_slots, len(self.joint_names),
                                   self.prompt)
        feeds = {f'images.{slot}': img for slot, img in obs.images.items()}
        feeds.update(state=obs.state, t=float(t), t_obs=float(t if t_obs is None else t_obs))
        if self.prompt:
            feeds['prompt'] = obs.prompt
        if committed is not None:
            if not self.rtc:
                raise ValueError('committed: this artifact was not built for real-time '
                                 'chunking (control.chunker.merge_mode rtc)')
            feeds.update(self._committed_rows(committed, delay, end))
        return feeds

    def _committed_rows(self, rows, delay, end) -> dict:
        horizon = self._chunker[1].horizon
        rows = np.asarray(rows, np.float32).reshape(-1, len(self.joint_names))
        if len(rows) > horizon:
            raise ValueError(f'committed: {len(rows)} actions, the chunk has {horizon}')
        delay = len(rows) if delay is None else int(delay)
        end = len(rows) if end is None else int(end)
        if not 0 <= delay <= len(rows) or not 0 <= end <= horizon:
            raise ValueError(f'committed: delay {delay} and end {end} must be within the '
                             f'{len(rows)} actions given and the chunk of {horizon}')
        out = {'committed': padded_actions(rows, horizon), 'delay': np.int64(delay)}
        if self.guided:
            out['guidance_end'] = np.int64(end)
        return out

    def _rtc_feeds(self, feeds: dict, t_arrive: float) -> dict:
        """The committed actions and delay (and, guided, where the pull ends) of an inference
        whose chunk is merged at t_arrive: the plan's actions from the observation's time on
        (none where the chunker does not merge by rtc: the denoise stage then samples as
        usual)."""
        if not self.rtc:
            return feeds
        if 'delay' in feeds:  # given (feeds(committed=...))
            self.last_delay = int(feeds['delay'])
            return feeds
        node_id, chunker = self._chunker
        if chunker.merge_mode == 'rtc':
            committed, delay, end = chunker.rtc_inputs(self.state.get(node_id),
                                                       feeds['t_obs'], t_arrive)
        else:
            committed = padded_actions(np.zeros((0, chunker.joints)), chunker.horizon)
            delay = end = np.int64(0)
        self.last_delay = int(delay)
        out = {**feeds, 'committed': committed, 'delay': delay}
        if self.guided:
            out['guidance_end'] = end
        return out

    # ---- execution ---------------------------------------------------------------------------

    def _run_groups(self, steps, values: dict, capture: dict | None) -> None:
        """Run schedule steps (runtime/schedule.py) over `values`, updated in place."""
        for step in steps:
            group, runner = step.group, step.runner
            start = time.perf_counter()
            feeds = {v: values.get(v) for v in runner.inputs}
            if step.action == 'start':
                runner.start(feeds)
                self.profiler.record(f'group:{group.name}.start', start,
                                     time.perf_counter() - start, 'group')
                continue
            out = {v: self.arena.view(v) for v in runner.outputs}
            if step.action == 'finish':
                results = runner.finish(feeds)
            elif capture is not None and group.backend == 'host':
                results = runner.run(feeds, self.state, out, capture=capture)
            else:
                results = runner.run(feeds, self.state, out)
            self.profiler.record(f'group:{group.name}', start, time.perf_counter() - start,
                                 'group')
            device_ms = getattr(runner, 'last_device_ms', None)
            if device_ms is not None:
                self.profiler.record(f'gpu:{group.name}', start, device_ms / 1e3, 'gpu')
            for name, value in results.items():
                values[name] = self.arena.put(name, value)
                if capture is not None and value is not None:
                    capture[name] = np.array(value)  # the arena may reuse these bytes later

    def _infer(self, feeds: dict, capture: dict | None = None):
        """Inference phase -> (a copy of the chunk, seconds)."""
        start = time.perf_counter()
        values = dict(feeds)
        self._run_groups(self._inference_steps[self.overlap], values, capture)
        seconds = time.perf_counter() - start
        self.profiler.record('inference', start, seconds, 'inference')
        chunk = values.get(self.chunk_value) if self.chunk_value else None
        return (None if chunk is None else np.array(chunk)), seconds

    def _tick(self, values: dict, capture: dict | None, start: float) -> dict:
        self._run_groups(self._tick_steps, values, capture)
        seconds = time.perf_counter() - start
        self.profiler.record('tick', start, seconds, 'tick')
        self.profiler.tick(seconds, self.period)
        outputs = {v: values[v] for v in self.artifact.graph.outputs}
        return {k: None if v is None else np.array(v) for k, v in outputs.items()}

    def run(self, feeds: dict, capture: dict | None = None) -> dict:
        """One synchronous tick over graph input values; returns copies of the graph outputs."""
        start = time.perf_counter()
        capture = self.capture_into if capture is None else capture
        values = {k: self.arena.put(k, v) for k, v in feeds.items()}
        if capture is not None:
            capture.update(feeds)
        self.last_inferred = self.needs_inference(feeds['t'])
        self.last_merged = None
        if self.last_inferred:
            # sync: the chunk is merged in this tick, so the committed actions are those due
            # from the observation's time to now
            for name, value in self._rtc_feeds(feeds, feeds['t']).items():
                if name not in values:
                    values[name] = self.arena.put(name, value)
                    if capture is not None:
                        capture[name] = np.array(value)
            chunk, seconds = self._infer(values, capture)
            self.latency.record(seconds)
            self.last_merged = InferenceResult(None, float(feeds['t_obs']), None, seconds,
                                               self.inference_count)
            self.inference_count += 1
            if self.chunk_value:
                values[self.chunk_value] = chunk
        elif self.chunk_value:
            values[self.chunk_value] = None
        return self._tick(values, capture, start)

    def run_async(self, feeds: dict) -> dict | None:
        """One asynchronous tick: never waits for inference. None until the first chunk."""
        start = time.perf_counter()
        result = self.last_merged = self._worker.poll()
        chunk, t_obs = None, feeds['t_obs']
        if result is not None:
            if result.error:
                self.inference_errors += 1
                self.last_error = result.error
            else:
                chunk, t_obs = result.chunk, result.t_obs
                self.latency.record(result.seconds)
        self.last_inferred = False
        if chunk is None and self.needs_inference(feeds['t']) and not self._worker.busy:
            snapshot = {k: np.array(v) if isinstance(v, np.ndarray) else v
                        for k, v in feeds.items()}
            # async: merged on the first tick after it finishes, predicted from the latency
            arrive = arrival_time(feeds['t'], feeds['t_obs'], self.latency.expected(),
                                  self.period)
            snapshot = self._rtc_feeds(snapshot, arrive)
            self.last_inferred = self._worker.submit(snapshot, feeds['t_obs'],
                                                     self.inference_count)
            self.inference_count += self.last_inferred
        if chunk is None and not self.has_plan():
            self.profiler.tick(time.perf_counter() - start, self.period)
            return None
        values = {k: self.arena.put(k, v) for k, v in feeds.items()}
        values[self.chunk_value] = chunk
        values[self.t_obs_value] = t_obs
        return self._tick(values, None, start)

    def infer(self, observation, capture: dict | None = None, committed=None,
              delay: int | None = None, end: int | None = None) -> np.ndarray:
        """One inference outside the control loop: the raw action chunk in robot units,
        (horizon, joints), as the chunker would receive it. Call n of an episode draws the same
        flow noise as the node's nth inference; `reset()` starts an episode. The control state
        (chunker, smoother, clamp) is neither read nor changed: for offline evaluation and
        checks against the training code. `capture`: a dict that receives every value the
        inference computed (token ids, the normalised actions...). `committed`, `delay`,
        `end` (rtc artifacts; as `feeds` takes them): generate the chunk around these actions
        (none: no delay)."""
        if self.chunk_value is None:
            raise ValueError('infer: this artifact has no action chunk (no chunker node)')
        if self._worker:
            self._worker.wait_idle(timeout=30)
        if self.rtc and committed is None:
            committed = np.zeros((0, len(self.joint_names)))
        feeds = self.feeds(observation, 0.0, committed=committed, delay=delay, end=end)
        chunk, _ = self._infer({k: self.arena.put(k, v) for k, v in feeds.items()}, capture)
        return chunk

    def step(self, observation, t: float, t_obs: float | None = None):
        """One control tick: the command for time t (None in async mode before any chunk)."""
        feeds = self.feeds(observation, t, t_obs)
        outputs = self.run_async(feeds) if self._worker else self.run(feeds)
        if outputs is None:
            return None
        (command,) = outputs.values()
        return command

    def lookahead(self, t: float, n: int, start=None) -> np.ndarray:
        """The next n planned actions after time t (for multi-point trajectories), clipped to
        the clamp's joint limits and, from `start` (the command just sent), to its max step
        per tick from one point to the next: the trajectory obeys the limits the commands do.
        Fewer rows when the plan ends sooner."""
        if self._chunker is None or n <= 0 or not self.has_plan():
            return np.zeros((0, len(self.joint_names)))
        node_id, chunker = self._chunker
        state = self.state.get(node_id)
        plan = chunker.plan(state)
        k = int(round((t - float(state['t0'][0])) / chunker.dt))
        rows = np.array(plan[max(k + 1, 0):max(k + 1, 0) + n], dtype=np.float64)
        clamp = [node for node in self.artifact.graph.nodes if node.op == 'clamp']
        if not clamp:
            return rows
        attrs = clamp[0].attrs
        rows = np.clip(rows, attrs['lower'], attrs['upper'])
        if start is not None:
            step = np.broadcast_to(np.asarray(attrs['max_step'], np.float64), rows.shape[1:])
            previous = np.asarray(start, np.float64)
            for i in range(len(rows)):
                rows[i] = previous = previous + np.clip(rows[i] - previous, -step, step)
        return rows

    # ---- profiling ---------------------------------------------------------------------------

    def profile(self) -> dict:
        """Plain data: latency statistics, deadline misses, errors, arena size, identity, the
        prompt length each group built with several (spec fusion.text_lengths) last ran at, and
        whether a group's stored cuBLASLt algorithms run here (backends/cuda/run_side.py)."""
        data = self.profiler.profile()
        if self.rtc:
            data['rtc'] = {'delay': self.last_delay,
                           'expected_latency_ms': 1e3 * self.latency.expected()}
        data.update(artifact_id=self.id, execution=self.execution, device=self.device,
                    rate_hz=self.rate_hz, inference_errors=self.inference_errors,
                    arena_bytes=self.arena.nbytes,
                    backends={g.name: g.backend for g in self.artifact.plan.groups},
                    text_lengths={g.name: r.last_text_length for g, r in self.inference_runners
                                  if getattr(r, 'last_text_length', None) is not None},
                    gemm_algorithms={g.name: r.gemm_algorithms for g, r in self.inference_runners
                                     if getattr(r, 'gemm_algorithms', None)})
        return data

    def write_trace(self, path: str) -> None:
        """Chrome / Perfetto trace JSON of the recent events."""
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(self.profiler.chrome_trace(), f)
