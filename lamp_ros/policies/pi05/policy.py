"""The eager pi0.5 policy: the Python prototype that every compiled artifact is compared to.

`Pi05Policy.infer(observation) -> actions` runs the whole path a robot needs, as a researcher
writes it: normalise the joint state with quantile stats, discretise it into 256 bins and write
it into the prompt, tokenise with sentencepiece, resize-with-pad each camera image and scale it to
[-1, 1], encode the images, run the prefix into a KV cache, integrate the flow with the action
expert, then un-normalise and un-pad the actions. Each step is a method marked as a pipeline
stage (`@stage`, `model_stage`), so the tracer records the pipeline without a rewrite; the
marks change nothing when the policy runs eagerly.
"""

from dataclasses import asdict, dataclass

import numpy as np
import torch

from lamp_ros.observation import DEFAULT_PROMPT, PolicyInterface, validate_observation
from lamp_ros.ops.chunker import padded_actions
from lamp_ros.ops.image import preprocess_image, stack_cameras
from lamp_ros.ops.noise import sample_noise
from lamp_ros.ops.normalize import (normalize_actions, Normalizer, NormStats,
                                    unnormalize_actions)
from lamp_ros.ops.prompt import prompt_format, tokenize_pi05
from lamp_ros.ops.tokenizer import Tokenizer
from lamp_ros.policies.pi05 import assets
from lamp_ros.policies.pi05.config import get_preset, Pi05Config
from lamp_ros.policies.pi05.example import DEFAULT_SIZES
from lamp_ros.policies.pi05.model import Pi05Model
from lamp_ros.policies.pi05.weights import init_weights, load_weights
from lamp_ros.trace.stage import as_numpy, model_stage, stage

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


@dataclass(frozen=True)
class GlueConfig:
    """Host-side choices of the pipeline that change results (recorded in every artifact).
    `prompt_format`: how the prompt is written (ops/prompt.py FORMATS: lamp, lerobot, openpi),
    which follows the checkpoint's trainer."""

    interpolation: str = 'linear'
    noise_seed: int = 0
    prompt_format: str = 'lamp'


@dataclass(frozen=True)
class RobotIO:
    """The robot side of the model: its joints in action-vector order and how their state and
    actions map into the model's space and back (as the checkpoint's trainer did it)."""

    joint_names: tuple
    state: Normalizer
    actions: Normalizer

    def __post_init__(self):
        names = tuple(self.joint_names)
        object.__setattr__(self, 'joint_names', names)
        if not names or len(set(names)) != len(names):
            raise ValueError(f'joint_names: distinct names, one per joint, got {list(names)}')
        for key in ('state', 'actions'):
            dim = getattr(self, key).dim
            if dim is not None and dim != len(names):
                raise ValueError(f'{key} stats have {dim} values, there are {len(names)} '
                                 f'joints')

    @classmethod
    def from_norm_stats(cls, stats: NormStats, joint_names=None) -> 'RobotIO':
        """lamp's own norm-stats JSON: quantiles, openpi's epsilon; `joint_names` renames the
        joints (a robot file's names for the same arm)."""
        names = stats.joint_names if joint_names is None else tuple(joint_names)
        if len(names) != len(stats.joint_names):
            raise ValueError(f'{len(names)} joints {list(names)}; the norm stats have '
                             f'{len(stats.joint_names)} {list(stats.joint_names)}')
        return cls(names, stats.state.normalizer(), stats.actions.normalizer())


class Pi05Policy:
    """Model + tokenizer + robot io (joints, normalisation) + glue; `infer` is the reference
    implementation. `provenance`: where the weights came from (an imported checkpoint's files
    and their sha256, which tensor came from where), kept in the artifact. `supports_rtc`:
    the real-time chunking modes `infer(observation, committed=..., delay=...)` runs (rtc.py;
    trained: for a model trained with RTC delays, as the demo policy is; guided: any).
    `loop_state_layers`: the layers that read the denoise loop's state x_t or write its
    velocity, which a precision plan keeps at full precision (compiler/precision_plan.py)."""

    supports_rtc = ('trained', 'guided')
    loop_state_layers = ('denoise.action_in_proj', 'denoise.action_out_proj')

    def __init__(self, config: Pi05Config, model: Pi05Model, tokenizer: Tokenizer,
                 robot: RobotIO | NormStats, glue: GlueConfig = GlueConfig(),
                 provenance: dict | None = None):
        robot = RobotIO.from_norm_stats(robot) if isinstance(robot, NormStats) else robot
        if tokenizer.vocab_size > config.vocab_size:
            raise ValueError(f'tokenizer: vocab size {tokenizer.vocab_size} exceeds the model '
                             f'embedding table ({config.vocab_size})')
        if len(robot.joint_names) > config.action_dim:
            raise ValueError(f'{len(robot.joint_names)} joints exceed the model action dim '
                             f'{config.action_dim}')
        self.config = config
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.robot = robot
        self.glue = glue
        self.prompt_format = prompt_format(glue.prompt_format)
        self.provenance = provenance
        self.state = {}
        self.reset()

    @classmethod
    def create(cls, preset: str = 'pi05_tiny', seed: int = 0, weights: str | None = None,
               stage_seeds: dict | None = None, norm_stats: str | None = None,
               tokenizer: str | None = None, glue: GlueConfig = GlueConfig(),
               device: str = 'cpu', dtype: str | None = None,
               robot: 'RobotIO | None' = None, num_steps: int | None = None) -> 'Pi05Policy':
        """Build a policy from a preset; weights from `seed` or a safetensors file; `robot`
        (joints and their normalisation) instead of the norm stats file; `num_steps`: Euler
        steps of the flow instead of the preset's (fewer: a faster, coarser sample)."""
        config = get_preset(preset, **({'num_steps': num_steps} if num_steps else {}))
        torch_dtype = DTYPES[dtype or config.dtype]
        with torch.device(device):
            model = Pi05Model(config).to(torch_dtype)
        if weights:
            load_weights(model, weights)
        else:
            init_weights(model, seed, stage_seeds)
        if robot is None:
            robot = NormStats.load(norm_stats or assets.norm_stats_path())
        return cls(config, model, Tokenizer(tokenizer or assets.tokenizer_path()), robot, glue)

    @classmethod
    def from_checkpoint(cls, checkpoint, tokenizer: str, joint_names=None,
                        glue: GlueConfig | None = None, device: str = 'cpu',
                        dtype: str | None = None,
                        robot: 'RobotIO | None' = None) -> 'Pi05Policy':
        """A LeRobot or openpi checkpoint (checkpoint/reader.py `Checkpoint`) with the user's
        tokenizer; `glue.prompt_format` defaults to the checkpoint's trainer's. `robot`: joints
        and normalisation from a robot file instead of the checkpoint's own."""
        from lamp_ros.policies.pi05.checkpoint.load import load_model, provenance
        from lamp_ros.policies.pi05.checkpoint.reader import check_tokenizer
        tok = Tokenizer(tokenizer)
        check_tokenizer(tok, checkpoint)
        if robot is None:
            names = tuple(joint_names or (f'joint{i}' for i in range(checkpoint.joints)))
            robot = RobotIO(names, checkpoint.state, checkpoint.actions)
        if len(robot.joint_names) != checkpoint.joints:
            raise ValueError(f'{len(robot.joint_names)} joints {list(robot.joint_names)}; the '
                             f'checkpoint has {checkpoint.joints}')
        glue = glue or GlueConfig(prompt_format=checkpoint.prompt_format)
        model = load_model(checkpoint, device, dtype)
        return cls(checkpoint.config, model, tok, robot, glue, provenance(checkpoint, dtype))

    def reset(self) -> None:
        """Start a new episode: the noise counter restarts."""
        self.state['noise'] = {'counter': np.zeros((1,), np.int64)}

    @property
    def joint_names(self) -> tuple:
        return self.robot.joint_names

    @property
    def interface(self) -> PolicyInterface:
        """The config's camera slots (any frame size), the robot's joints, a task prompt."""
        low, high = self.robot.state.typical_range(len(self.joint_names))
        sizes = {slot: size for slot, size in DEFAULT_SIZES.items()
                 if slot in self.config.camera_slots}
        return PolicyInterface(self.config.camera_slots, self.joint_names, prompt=True,
                               camera_sizes=sizes, state_low=tuple(map(float, low)),
                               state_high=tuple(map(float, high)),
                               action_horizon=self.config.action_horizon)

    @property
    def resources(self) -> dict:
        """Files its host stages read at run time, packed into the artifact (resources/)."""
        return {'tokenizer.model': self.tokenizer.model_path}

    def example_observation(self, seed: int = 0, sizes: dict | None = None,
                            prompt: str = DEFAULT_PROMPT) -> dict:
        """An observation for tracing and parity (example.py's frame sizes), the state in the
        range the state stats describe."""
        return self.interface.example_observation(seed, prompt, sizes)

    # ---- host stages (numpy) -------------------------------------------------------------

    @stage('normalize_state', 'preprocess', outputs=('state',),
           attrs=lambda self: self.robot.state.attrs())
    def normalize_state(self, state: np.ndarray) -> np.ndarray:
        """Joint positions -> the model's space by the state stats (robot dims, no padding)."""
        return self.robot.state.normalize(state)

    @stage('discretize_state', 'preprocess', outputs=('bins',),
           attrs=lambda self: {'bins': 256, **self.prompt_format.attrs()})
    def discretize_state(self, norm_state: np.ndarray) -> np.ndarray:
        return self.prompt_format.discretize(norm_state, 256)

    @stage('tokenize', 'host', outputs=('token_ids', 'token_mask'),
           attrs=lambda self: {'format': 'pi05', 'max_len': self.config.max_token_len,
                               'tokenizer_sha256': self.tokenizer.sha256,
                               **self.prompt_format.attrs()})
    def tokenize(self, prompt: str, state_bins: np.ndarray):
        """pi0.5 prompt `Task: ..., State: ...;\\nAction: ` -> (ids, mask), each (1, L)."""
        return tokenize_pi05(self.tokenizer, prompt, state_bins, self.config.max_token_len,
                             self.prompt_format)

    @stage('preprocess_image', 'preprocess', outputs=('pixels',), key='camera',
           attrs=lambda self: {'size': self.config.vision.image_size,
                               'interpolation': self.glue.interpolation, 'pixels': 'uint8'})
    def preprocess_image(self, image: np.ndarray, camera: str) -> np.ndarray:
        """(H, W, 3) uint8 of any size -> (S, S, 3) uint8, aspect kept (the vision stage maps
        it to [-1, 1] on the model's device)."""
        return preprocess_image(image, self.config.vision.image_size, self.glue.interpolation)

    @stage('stack_cameras', 'host', outputs=('pixels', 'image_mask'),
           attrs=lambda self: {'slots': list(self.config.camera_slots),
                               'size': self.config.vision.image_size, 'pixels': 'uint8'})
    def stack_cameras(self, images: dict):
        """{slot: (S, S, 3)} for the cameras present -> (1, cams, S, S, 3), mask (1, cams)."""
        return stack_cameras(images, self.config.camera_slots, self.config.vision.image_size)

    @stage('sample_noise', 'stateful', outputs=('noise',), state='noise',
           attrs=lambda self: {'seed': self.glue.noise_seed,
                               'shape': [1, self.config.action_horizon, self.config.action_dim]})
    def sample_noise(self) -> np.ndarray:
        """Standard normal (1, horizon, action_dim): the flow's starting point at t=1."""
        counter = self.state['noise']['counter']
        shape = (1, self.config.action_horizon, self.config.action_dim)
        noise = sample_noise(self.glue.noise_seed, int(counter[0]), shape)
        self.state['noise'] = {'counter': counter + 1}
        return noise

    @stage('unnormalize_actions', 'postprocess', outputs=('chunk',),
           attrs=lambda self: {**self.robot.actions.attrs(), 'joints': len(self.joint_names)})
    def unnormalize_actions(self, actions) -> np.ndarray:
        """(1, horizon, action_dim) normalised -> (horizon, joints) in robot units."""
        return unnormalize_actions(as_numpy(actions), self.robot.actions,
                                   len(self.joint_names))

    @stage('normalize_actions', 'preprocess', outputs=('committed',),
           attrs=lambda self: {**self.robot.actions.attrs(), 'dim': self.config.action_dim})
    def normalize_committed(self, committed: np.ndarray) -> np.ndarray:
        """(horizon, joints) committed actions in robot units -> (1, horizon, action_dim) in
        the model's space (real-time chunking)."""
        return normalize_actions(committed, self.robot.actions, self.config.action_dim)

    # ---- model stages (torch) ------------------------------------------------------------

    vision = model_stage('vision', 'model.vision', outputs=('image_tokens',))
    prefix = model_stage('prefix', 'model.prefix', outputs=('k_cache', 'v_cache', 'prefix_mask'))
    denoise = model_stage('denoise', 'model.expert', outputs=('actions',))
    # real-time chunking's guided mode (rtc.GuidedExpert, made by `guided_stage`)
    denoise_guided = model_stage('denoise', 'guided_expert', outputs=('actions',))

    # ---- the whole path ------------------------------------------------------------------

    def infer(self, observation, noise: np.ndarray | None = None,
              committed: np.ndarray | None = None, delay=None,
              guidance: dict | None = None) -> np.ndarray:
        """observation -> action chunk (horizon, joints) in robot units.

        Real-time chunking (rtc.py), trained mode: `committed` are the actions executed while
        this chunk is computed, in robot units; the chunk starts with the first `delay` of
        them and the model generates the rest around them. Either (d, joints) with no delay
        (d = its rows), or (horizon, joints) with `delay` (an integer: a control pipeline's
        graph inputs, fixed in shape whatever the delay). Guided mode (`guidance`: {'end',
        'schedule', 'max_weight'}): `committed` (horizon, joints) is the previous plan for the
        same times, and the chunk is pulled toward its first `end` rows (`end` an integer, or
        a graph input)."""
        pixels, image_mask, token_ids, token_mask = self.model_inputs(observation)
        image_tokens = self.vision(pixels)
        k_cache, v_cache, prefix_mask = self.prefix(image_tokens, image_mask, token_ids,
                                                    token_mask)
        noise = self.sample_noise() if noise is None else _check_noise(noise, self.config)
        if committed is None:
            actions = self.denoise(k_cache, v_cache, prefix_mask, noise)
        else:
            committed, delay = self._committed(committed, delay)
            previous = self.normalize_committed(committed)
            if guidance is None:
                actions = self.denoise(k_cache, v_cache, prefix_mask, noise, previous, delay)
            else:
                self.guided_stage(guidance['schedule'], guidance['max_weight'])
                end = guidance['end']
                end = np.int64(end) if isinstance(end, int) else end
                actions = self.denoise_guided(k_cache, v_cache, prefix_mask, noise, previous,
                                              delay, end)
        return self.unnormalize_actions(actions)

    def guided_stage(self, schedule: str, max_weight: float):
        """The guided denoise stage for these settings (rtc.GuidedExpert on the model's
        expert, kept while the settings stay)."""
        from lamp_ros.policies.pi05.rtc import GuidedExpert
        stage = getattr(self, 'guided_expert', None)
        if stage is None or (stage.schedule, stage.max_weight) != (schedule, float(max_weight)):
            self.guided_expert = GuidedExpert(self.model.expert, schedule, max_weight).eval()
        return self.guided_expert

    def model_inputs(self, observation) -> tuple:
        """observation -> the model's inputs by the host stages: (pixels (1, cams, S, S, 3)
        uint8, image_mask (1, cams), token_ids (1, L), token_mask (1, L)); what `infer` feeds
        the model and what training (training.py) learns from."""
        obs = validate_observation(observation, self.config.camera_slots, len(self.joint_names))
        bins = self.discretize_state(self.normalize_state(obs.state))
        token_ids, token_mask = self.tokenize(obs.prompt, bins)
        pixels, image_mask = self.stack_cameras(
            {slot: self.preprocess_image(img, camera=slot) for slot, img in obs.images.items()})
        return pixels, image_mask, token_ids, token_mask

    def _committed(self, committed, delay) -> tuple:
        """-> ((horizon, joints) committed actions, delay): rows past the delay are never read
        (zeros when padded here)."""
        horizon, joints = self.config.action_horizon, len(self.joint_names)
        if delay is None:
            rows = np.asarray(committed, np.float32)
            if rows.ndim != 2 or rows.shape[1] != joints or len(rows) > horizon:
                raise ValueError(f'committed: expected (d <= {horizon}, {joints}), got '
                                 f'{rows.shape}')
            return padded_actions(rows, horizon), np.int64(len(rows))
        if np.shape(committed) != (horizon, joints):
            raise ValueError(f'committed: expected ({horizon}, {joints}) with a delay, got '
                             f'{np.shape(committed)}')
        if not 0 <= int(delay) <= horizon:
            raise ValueError(f'delay {int(delay)}: must be within 0..{horizon} actions')
        return committed, delay

    def describe(self) -> dict:
        """JSON-ready identity of the policy (preset, glue) for artifacts and logs."""
        return {'preset': self.config.name, 'glue': asdict(self.glue),
                'joint_names': list(self.joint_names)}


def _check_noise(noise, config: Pi05Config) -> np.ndarray:
    noise = np.asarray(noise, dtype=np.float32)
    shape = (config.action_horizon, config.action_dim)
    if noise.shape == shape:
        noise = noise[None]
    if noise.shape != (1, *shape):
        raise ValueError(f'noise: expected shape {shape} or (1, *{shape}), got {noise.shape}')
    if not np.isfinite(noise).all():
        raise ValueError('noise: contains non-finite values')
    return noise
