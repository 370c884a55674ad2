"""Parameter counts computed from a config alone, without allocating a single weight.

Used to check that `pi05_full` has the published sizes (SigLIP So400m ~414M, Gemma 2B ~1.98B
without the embedding table, Gemma 300M ~311M without adaRMS modulation) and, on the tiny preset,
cross-checked against the real modules so the formulas cannot drift from the code.
"""

from lamp_ros.policies.pi05.config import GemmaConfig, Pi05Config, VisionConfig


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def vision_params(v: VisionConfig, out_width: int) -> int:
    """SigLIP: conv patch embed, positions, blocks with biases, final LayerNorm, projector."""
    patch = _linear(3 * v.patch_size ** 2, v.width, bias=True)
    positions = v.num_patches * v.width
    attention = 4 * _linear(v.width, v.width, bias=True)
    mlp = _linear(v.width, v.mlp_dim, bias=True) + _linear(v.mlp_dim, v.width, bias=True)
    norms = 2 * 2 * v.width
    block = attention + mlp + norms
    return patch + positions + v.depth * block + 2 * v.width + _linear(v.width, out_width, True)


def _gemma_layer(g: GemmaConfig) -> int:
    q = _linear(g.width, g.num_heads * g.head_dim, bias=False)
    kv = 2 * _linear(g.width, g.num_kv_heads * g.head_dim, bias=False)
    o = _linear(g.num_heads * g.head_dim, g.width, bias=False)
    mlp = 3 * _linear(g.width, g.mlp_dim, bias=False)
    return q + kv + o + mlp


def llm_params(g: GemmaConfig) -> int:
    """Gemma prefix LM without the embedding table: layers, their two RMSNorms, final norm."""
    return g.depth * (_gemma_layer(g) + 2 * g.width) + g.width


def expert_params(g: GemmaConfig) -> int:
    """Gemma action expert layers without the adaRMS modulation (reported separately)."""
    return g.depth * _gemma_layer(g)


def expert_adarms_params(g: GemmaConfig) -> int:
    """adaRMS modulation: one Linear(width -> 3*width) per norm (2 per layer + final)."""
    return (2 * g.depth + 1) * _linear(g.width, 3 * g.width, bias=True)


def expert_io_params(cfg: Pi05Config) -> int:
    """Action in/out projections and the two-layer time MLP."""
    w = cfg.expert.width
    return (_linear(cfg.action_dim, w, True) + _linear(w, cfg.action_dim, True)
            + 2 * _linear(w, w, True))


def param_counts(cfg: Pi05Config) -> dict:
    """Counts per component; keys match the module names of `Pi05Model`."""
    counts = {
        'vision': vision_params(cfg.vision, cfg.llm.width),
        'llm': llm_params(cfg.llm),
        'embedding': cfg.vocab_size * cfg.llm.width,
        'expert': expert_params(cfg.expert),
        'expert_adarms': expert_adarms_params(cfg.expert),
        'expert_io': expert_io_params(cfg),
    }
    counts['total'] = sum(counts.values())
    return counts
