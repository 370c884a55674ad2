"""Tensor names of LeRobot and openpi pi0.5 checkpoints -> lamp's Pi05Model parameter names.

LeRobot 0.6.1 saves `model.<name>`; openpi's `convert_jax_model_to_pytorch.py` saves `<name>`;
both name the same modules (openpi's PaliGemmaWithExpertModel, which LeRobot ported). The rules
below are the whole correspondence: one regular expression per kind of tensor. What LeRobot's
own loader accepts besides (`_fix_pytorch_state_dict_keys`) is accepted here too: the legacy
`action_time_mlp_*` names, and the language embedding taken from the PaliGemma `lm_head` when a
checkpoint has no `embed_tokens` (openpi#669, LeRobot#2307). The `lm_head`s are never read
otherwise: pi0.5 never decodes text, and at full size they are 0.8 G parameters.
"""

import re

PALIGEMMA = r'paligemma_with_expert\.paligemma\.model\.'
VISION = PALIGEMMA + r'vision_tower\.vision_model\.'
LLM = PALIGEMMA + r'language_model\.'
EXPERT = r'paligemma_with_expert\.gemma_expert\.model\.'
W = r'(weight|bias)'

RULES = [(re.compile(pattern + r'$'), target) for pattern, target in (
    (VISION + r'embeddings\.patch_embedding\.' + W, r'vision.patch_embed.\1'),
    (VISION + r'embeddings\.position_embedding\.weight', 'vision.pos_embed'),
    (VISION + r'encoder\.layers\.(\d+)\.layer_norm([12])\.' + W, r'vision.blocks.\1.norm\2.\3'),
    (VISION + r'encoder\.layers\.(\d+)\.self_attn\.([qkv])_proj\.' + W,
     r'vision.blocks.\1.\2_proj.\3'),
    (VISION + r'encoder\.layers\.(\d+)\.self_attn\.out_proj\.' + W,
     r'vision.blocks.\1.out_proj.\2'),
    (VISION + r'encoder\.layers\.(\d+)\.mlp\.fc([12])\.' + W, r'vision.blocks.\1.fc\2.\3'),
    (VISION + r'post_layernorm\.' + W, r'vision.post_norm.\1'),
    (PALIGEMMA + r'multi_modal_projector\.linear\.' + W, r'vision.projector.\1'),
    (LLM + r'embed_tokens\.weight', 'prefix.embed.weight'),
    (LLM + r'layers\.(\d+)\.input_layernorm\.weight', r'prefix.layers.\1.input_norm.weight'),
    (LLM + r'layers\.(\d+)\.post_attention_layernorm\.weight',
     r'prefix.layers.\1.post_attn_norm.weight'),
    (LLM + r'layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight',
     r'prefix.layers.\1.attn.\2_proj.weight'),
    (LLM + r'layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight',
     r'prefix.layers.\1.mlp.\2_proj.weight'),
    (LLM + r'norm\.weight', 'prefix.final_norm.weight'),
    (EXPERT + r'layers\.(\d+)\.input_layernorm\.dense\.' + W,
     r'expert.layers.\1.input_norm.modulation.\2'),
    (EXPERT + r'layers\.(\d+)\.post_attention_layernorm\.dense\.' + W,
     r'expert.layers.\1.post_attn_norm.modulation.\2'),
    (EXPERT + r'layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight',
     r'expert.layers.\1.attn.\2_proj.weight'),
    (EXPERT + r'layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight',
     r'expert.layers.\1.mlp.\2_proj.weight'),
    (EXPERT + r'norm\.dense\.' + W, r'expert.final_norm.modulation.\1'),
    (r'(action_in_proj|action_out_proj|time_mlp_in|time_mlp_out)\.' + W, r'expert.\1.\2'),
    (r'action_time_mlp_(in|out)\.' + W, r'expert.time_mlp_\1.\2'),  # older pi05 exports
)]


def _plain(pattern: str) -> str:
    return pattern.replace('\\.', '.')


# lamp parameter -> LeRobot tensor (without `model.`): the rules above read backwards, for
# writing a checkpoint LeRobot loads (write.py). keys_test checks that both directions agree.
REVERSE = [(re.compile(pattern + r'$'), target) for pattern, target in (
    (r'vision\.patch_embed\.' + W, _plain(VISION) + r'embeddings.patch_embedding.\1'),
    (r'vision\.pos_embed', _plain(VISION) + 'embeddings.position_embedding.weight'),
    (r'vision\.blocks\.(\d+)\.norm([12])\.' + W,
     _plain(VISION) + r'encoder.layers.\1.layer_norm\2.\3'),
    (r'vision\.blocks\.(\d+)\.([qkv])_proj\.' + W,
     _plain(VISION) + r'encoder.layers.\1.self_attn.\2_proj.\3'),
    (r'vision\.blocks\.(\d+)\.out_proj\.' + W,
     _plain(VISION) + r'encoder.layers.\1.self_attn.out_proj.\2'),
    (r'vision\.blocks\.(\d+)\.fc([12])\.' + W, _plain(VISION) + r'encoder.layers.\1.mlp.fc\2.\3'),
    (r'vision\.post_norm\.' + W, _plain(VISION) + r'post_layernorm.\1'),
    (r'vision\.projector\.' + W, _plain(PALIGEMMA) + r'multi_modal_projector.linear.\1'),
    (r'prefix\.embed\.weight', _plain(LLM) + 'embed_tokens.weight'),
    (r'prefix\.layers\.(\d+)\.input_norm\.weight',
     _plain(LLM) + r'layers.\1.input_layernorm.weight'),
    (r'prefix\.layers\.(\d+)\.post_attn_norm\.weight',
     _plain(LLM) + r'layers.\1.post_attention_layernorm.weight'),
    (r'prefix\.layers\.(\d+)\.attn\.([qkvo])_proj\.weight',
     _plain(LLM) + r'layers.\1.self_attn.\2_proj.weight'),
    (r'prefix\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight',
     _plain(LLM) + r'layers.\1.mlp.\2_proj.weight'),
    (r'prefix\.final_norm\.weight', _plain(LLM) + 'norm.weight'),
    (r'expert\.layers\.(\d+)\.input_norm\.modulation\.' + W,
     _plain(EXPERT) + r'layers.\1.input_layernorm.dense.\2'),
    (r'expert\.layers\.(\d+)\.post_attn_norm\.modulation\.' + W,
     _plain(EXPERT) + r'layers.\1.post_attention_layernorm.dense.\2'),
    (r'expert\.layers\.(\d+)\.attn\.([qkvo])_proj\.weight',
     _plain(EXPERT) + r'layers.\1.self_attn.\2_proj.weight'),
    (r'expert\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight',
     _plain(EXPERT) + r'layers.\1.mlp.\2_proj.weight'),
    (r'expert\.final_norm\.modulation\.' + W, _plain(EXPERT) + r'norm.dense.\1'),
    (r'expert\.(action_in_proj|action_out_proj|time_mlp_in|time_mlp_out)\.' + W, r'\1.\2'),
)]

LM_HEAD = 'paligemma_with_expert.paligemma.lm_head.weight'
UNUSED = (LM_HEAD, 'paligemma_with_expert.gemma_expert.lm_head.weight')
EMBED = 'prefix.embed.weight'
# Tensors only pi0 has (pi0.5 writes the state into the prompt and conditions by adaRMS).
PI0_MARKERS = (re.compile(r'state_proj\.'),
               re.compile(EXPERT + r'layers\.\d+\.input_layernorm\.weight$'))


def strip_prefix(name: str) -> str:
    """LeRobot's `model.` prefix off (openpi's names have none)."""
    return name[len('model.'):] if name.startswith('model.') else name


def lamp_name(name: str) -> str | None:
    """The Pi05Model parameter a checkpoint tensor fills, or None if no rule knows it."""
    bare = strip_prefix(name)
    for pattern, target in RULES:
        if pattern.match(bare):
            return pattern.sub(target, bare)
    return None


def lerobot_name(name: str) -> str:
    """The LeRobot tensor name (with its `model.` prefix) of a Pi05Model parameter."""
    for pattern, target in REVERSE:
        if pattern.match(name):
            return 'model.' + pattern.sub(target, name)
    raise KeyError(f'{name}: no LeRobot name for this parameter')


def is_unused(name: str) -> bool:
    return strip_prefix(name) in UNUSED


def is_pi0(name: str) -> bool:
    bare = strip_prefix(name)
    return any(p.match(bare) for p in PI0_MARKERS)
