"""Configuration of the pi0.5-shaped policy: frozen dataclasses and the two presets.

The presets mirror openpi's `pi0_config.py`: `pi05_full` has the published dimensions
(SigLIP So400m/14, Gemma 2B prefix, Gemma 300M action expert); `pi05_tiny` keeps every
structural feature (three camera slots, multi-query attention, adaRMS, 10 Euler steps, horizon
50, action dim 32) with widths small enough to run well under 100 ms on two CPU cores.
"""

from dataclasses import dataclass, replace

CAMERA_SLOTS = ('base', 'left_wrist', 'right_wrist')


@dataclass(frozen=True)
class VisionConfig:
    """SigLIP-style ViT: patch embedding, learned positions, pre-norm blocks."""

    image_size: int = 224
    patch_size: int = 14
    width: int = 1152
    depth: int = 27
    mlp_dim: int = 4304
    num_heads: int = 16
    eps: float = 1e-6

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class GemmaConfig:
    """Gemma-style decoder: RMSNorm, RoPE, multi-query attention, GeGLU MLP."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float = 1e-6
    rope_base: float = 10_000.0


@dataclass(frozen=True)
class Pi05Config:
    """Everything that fixes the model's shapes; weights come from a seed or a file."""

    name: str
    vision: VisionConfig
    llm: GemmaConfig
    expert: GemmaConfig
    vocab_size: int = 257_152
    camera_slots: tuple = CAMERA_SLOTS
    max_token_len: int = 200
    action_horizon: int = 50
    action_dim: int = 32
    num_steps: int = 10
    dtype: str = 'bfloat16'

    def __post_init__(self):
        same = ('num_heads', 'num_kv_heads', 'head_dim', 'depth')
        for key in same:
            if getattr(self.llm, key) != getattr(self.expert, key):
                raise ValueError(
                    f'{self.name}: expert.{key} must equal llm.{key} (the expert attends to the '
                    f'prefix KV cache layer by layer)')
        if self.vision.image_size % self.vision.patch_size:
            raise ValueError(f'{self.name}: vision.image_size must be a multiple of patch_size')
        if self.dtype not in ('float32', 'bfloat16', 'float16'):
            raise ValueError(f'{self.name}: dtype {self.dtype!r} is not float32/bfloat16/float16')

    @property
    def image_tokens(self) -> int:
        return len(self.camera_slots) * self.vision.num_patches

    @property
    def prefix_len(self) -> int:
        return self.image_tokens + self.max_token_len


PRESETS = {
    'pi05_full': Pi05Config(
        name='pi05_full',
        vision=VisionConfig(),
        llm=GemmaConfig(width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1,
                        head_dim=256),
        expert=GemmaConfig(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1,
                           head_dim=256),
    ),
    'pi05_tiny': Pi05Config(
        name='pi05_tiny',
        vision=VisionConfig(patch_size=28, width=64, depth=2, mlp_dim=128, num_heads=4),
        llm=GemmaConfig(width=128, depth=2, mlp_dim=256, num_heads=4, num_kv_heads=1,
                        head_dim=32),
        expert=GemmaConfig(width=64, depth=2, mlp_dim=128, num_heads=4, num_kv_heads=1,
                           head_dim=32),
        vocab_size=512,
        max_token_len=96,
        dtype='float32',
    ),
}


def get_preset(name: str, **overrides) -> Pi05Config:
    """Return a preset by name, optionally with top-level fields replaced."""
    if name not in PRESETS:
        raise ValueError(f'preset: unknown {name!r}; known: {", ".join(sorted(PRESETS))}')
    return replace(PRESETS[name], **overrides) if overrides else PRESETS[name]
