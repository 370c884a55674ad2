"""Lower the eager stage modules into the passes' form (layers.py, stages.py), weights shared.

Lowering changes no number: the lowered stage runs the same ops on the same tensors (the tests
check it bit for bit). It re-homes the eager submodules, so callers lower a deep copy when they
mean to change it. A stage already lowered is returned as it is.
"""

from lamp_ros.policies.pi05.staged.attention import Attention
from lamp_ros.policies.pi05.staged.fan_out import FanOut
from lamp_ros.policies.pi05.staged.geglu import GeGLU
from lamp_ros.policies.pi05.staged.layers import DecoderLayer, VisionBlock
from lamp_ros.policies.pi05.staged.rotary import Rotary
from lamp_ros.policies.pi05.staged.stages import ExpertStage, PrefixStage, VisionStage
from lamp_ros.policies.pi05.model import ActionExpert, PrefixEncoder
from lamp_ros.policies.pi05.siglip import VisionEncoder

KINDS = {VisionEncoder: 'vision', VisionStage: 'vision', PrefixEncoder: 'prefix',
         PrefixStage: 'prefix', ActionExpert: 'expert', ExpertStage: 'expert'}


def stage_kind(module) -> str | None:
    """'vision', 'prefix', 'expert' for a model stage (eager or lowered), else None."""
    return KINDS.get(type(module))


def _fan_out(owner, names, sizes) -> FanOut:
    return FanOut([((n,), (s,), getattr(owner, f'{n}_proj')) for n, s in zip(names, sizes)])


def _attention(attn) -> Attention:
    c = attn.cfg
    sizes = (c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim)
    return Attention(c, _fan_out(attn, 'qkv', sizes), attn.o_proj)


def _mlp(mlp) -> GeGLU:
    size = mlp.gate_proj.out_features
    return GeGLU(_fan_out(mlp, ('gate', 'up'), (size, size)), mlp.down_proj)


def _layer(layer) -> DecoderLayer:
    return DecoderLayer(layer.input_norm, _attention(layer.attn), layer.post_attn_norm,
                        _mlp(layer.mlp))


def _vision(m: VisionEncoder) -> VisionStage:
    blocks = [VisionBlock(b.num_heads, b.norm1, _fan_out(b, 'qkv', (m.cfg.width,) * 3),
                          b.out_proj, b.norm2, b.fc1, b.fc2) for b in m.blocks]
    return VisionStage(m.cfg, m.patch_embed, m.pos_embed, blocks, m.post_norm, m.projector,
                       m.cameras)


def _prefix(m: PrefixEncoder) -> PrefixStage:
    llm = m.cfg.llm
    return PrefixStage(m.cfg, m.embed, [_layer(x) for x in m.layers], m.final_norm,
                       Rotary(llm.head_dim, llm.rope_base))


def _expert(m: ActionExpert) -> ExpertStage:
    ex = m.cfg.expert
    return ExpertStage(m.cfg, m.action_in_proj, m.time_mlp_in, m.time_mlp_out,
                       [_layer(x) for x in m.layers], m.final_norm, m.action_out_proj,
                       Rotary(ex.head_dim, ex.rope_base))


def lower(module):
    """The stage in the passes' form (sharing its tensors), or the module if already lowered."""
    lowering = {VisionEncoder: _vision, PrefixEncoder: _prefix, ActionExpert: _expert}
    convert = lowering.get(type(module))
    if convert is None:
        if stage_kind(module) is None:
            raise TypeError(f'passes: {type(module).__name__} is not a model stage')
        return module
    return convert(module).train(module.training)
