"""`Runtime`: the one object the node, replay and benchmarks talk to.

`Runtime.load(path)` opens and verifies the artifact, checks its target against this machine and
loads every group's runner; `step(observation, t)` runs one control tick (inference only when
the chunker asks for a chunk), `reset()` starts an episode.
"""

import numpy as np

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import ArtifactError
from lamp_ros.backends import get_backend
from lamp_ros.backends.base import BackendUnavailable, LoadContext
from lamp_ros.observation import validate_observation
from lamp_ros.ops.chunker import ActionChunker
from lamp_ros.runtime.device import cuda_device_count
from lamp_ros.runtime.state import StateStore

GPU_TARGETS = ('cuda', 'tensorrt')


def default_device(target: str) -> str:
    return 'cuda:0' if target in GPU_TARGETS else 'cpu'


class Runtime:
    def __init__(self, artifact, device: str, runners: list, state: StateStore):
        self.artifact = artifact
        self.device = device
        self.runners = runners
        self.state = state
        abi = artifact.manifest['abi']
        self.camera_slots = tuple(abi['camera_slots'])
        self.joint_names = tuple(abi['joint_names'])
        self.rate_hz = float(abi['rate_hz'])
        plan = artifact.plan
        self.phases = [plan.phases[g.nodes[0]] for g in plan.groups]
        chunkers = [n for n in artifact.graph.nodes if n.op == 'chunker']
        self._chunker = (chunkers[0].id, ActionChunker.from_dict(chunkers[0].attrs)) \
            if chunkers else None
        self.last_inferred = False

    @classmethod
    def load(cls, path: str, device: str | None = None) -> 'Runtime':
        """Open, verify and load an artifact; refuse with the reason when anything is off."""
        artifact = open_artifact(path)
        target = artifact.manifest['target']
        device = device or default_device(target)
        if target in GPU_TARGETS or device.startswith('cuda'):
            if cuda_device_count() == 0:
                raise ArtifactError(f'target {target!r} (device {device}) needs a CUDA device; '
                                    'this machine has none')
        state = StateStore()
        ctx = LoadContext(artifact.root, artifact.graph, device, artifact.resources, state)
        runners = []
        for group in artifact.plan.groups:
            try:
                runners.append(get_backend(group.backend).load(group, ctx))
            except BackendUnavailable as exc:
                raise ArtifactError(f'plan.json group {group.name}: backend {group.backend} '
                                    f'cannot run here: {exc}') from exc
        return cls(artifact, device, runners, state)

    @property
    def id(self) -> str:
        return self.artifact.id

    def reset(self) -> None:
        """New episode: every stateful operator back to its initial state."""
        self.state.reset()

    def needs_inference(self, t: float) -> bool:
        if self._chunker is None:
            return True
        node_id, chunker = self._chunker
        return chunker.needs_chunk(self.state.get(node_id), t)

    def feeds(self, observation, t: float) -> dict:
        """Observation + tick time -> graph input values (validated; errors name the field)."""
        obs = validate_observation(observation, self.camera_slots, len(self.joint_names))
        feeds = {f'images.{slot}': img for slot, img in obs.images.items()}
        feeds.update(state=obs.state, prompt=obs.prompt, t=float(t))
        return feeds

    def run(self, feeds: dict, capture: dict | None = None) -> dict:
        """Run the groups for one tick over graph input values; returns the graph outputs."""
        t = feeds['t']
        infer = self.needs_inference(t)
        values = dict(feeds)
        for runner, phase in zip(self.runners, self.phases):
            if phase == 'inference' and not infer:
                values.update({v: None for v in runner.outputs})
                continue
            values.update(runner.run({v: values.get(v) for v in runner.inputs}, self.state))
        self.last_inferred = infer
        if capture is not None:
            capture.update(values)
        return {v: values[v] for v in self.artifact.graph.outputs}

    def step(self, observation, t: float) -> np.ndarray:
        """One synchronous control tick: the command for time t."""
        outputs = self.run(self.feeds(observation, t))
        (command,) = outputs.values()
        return command
