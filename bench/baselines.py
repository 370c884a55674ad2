"""Baselines for bench/gpu_pi05.py: what a PyTorch user gets without lamp_ros's compiler.

The issue behind gpu_pi05.py asks for two reference numbers next to lamp's:

  hf_eager       the same pi0.5 workload assembled from Hugging Face `transformers` modules
                 (SiglipVisionModel, GemmaModel for the prefix LM and for the action expert,
                 DynamicCache), eager attention, random weights: the usual "build it from HF
                 parts" starting point.
  torch_compile  the reference policy's `sample_actions` under `torch.compile` (max-autotune,
                 which also captures CUDA graphs in inductor).

Each builder returns `(fn, info)`; `fn(*args)` takes the 5-tuple of gpu_pi05.py's `inputs(cfg)`
(images, image_mask, token_ids, token_mask, noise) so `time_it(fn, args, runs)` can time it.
`transformers` is imported lazily: gpu_pi05.py and the rest of the repo do not need it.
"""

import copy
import json
import lzma
import os
import time

import torch
from torch import nn
from torch.nn import functional as F

from lamp_ros.policies.pi05.gemma import make_attention_mask
from lamp_ros.policies.pi05.model import posemb_sincos, suffix_attention
from lamp_ros.policies.pi05.siglip import to_model_range
from lamp_ros.provenance import provenance

HF_DIFFERENCES = (
    'HF modules: SiglipVisionModel (no pooling head) + Linear projector, GemmaModel prefix, a '
    'second GemmaModel as the expert; eager attention (matmul, additive float mask, fp32 '
    'softmax) where the reference uses einsum and a boolean fill. Masks and positions are the '
    'reference\'s (bidirectional prefix over valid tokens, action tokens see the valid prefix '
    'and each other), passed as prebuilt 4D additive masks, which HF uses as they are. The '
    'prefix DynamicCache is copied (copy.deepcopy) before every denoise step so it does not '
    'grow; the reference reads its cache without copying. The expert\'s token embedding is '
    'unused (vocab 1). ')
ADARMS_HOOKS = (
    'adaRMS is added with forward hooks: scale/shift from the time condition applied to the '
    'HF RMSNorm output (which keeps its own (1 + weight) scale; zero with copied reference '
    'weights), gates multiplied onto the attention and MLP outputs before the residual add.')
PLAIN_RMS = (
    'Plain RMSNorm instead of adaRMS (no per-norm modulation: 2 * depth + 1 Linear(w, 3w) per '
    'step less weight traffic than the reference); the time MLP output is added to the action '
    'embeddings instead.')


def _hf():
    import transformers
    return transformers


def _vision_model(cfg, dtype):
    hf = _hf()
    v = cfg.vision
    config = hf.SiglipVisionConfig(
        hidden_size=v.width, intermediate_size=v.mlp_dim, num_hidden_layers=v.depth,
        num_attention_heads=v.num_heads, patch_size=v.patch_size, image_size=v.image_size,
        layer_norm_eps=v.eps, hidden_act='gelu_pytorch_tanh', vision_use_head=False,
        attn_implementation='eager')
    return hf.SiglipVisionModel._from_config(config, dtype=dtype)


def _gemma_model(g, vocab_size, dtype):
    hf = _hf()
    # The expert reads no tokens (vocab 1), so it has no special token ids either.
    no_ids = {'pad_token_id': None, 'bos_token_id': None, 'eos_token_id': None}
    special = no_ids if vocab_size == 1 else {}
    config = hf.GemmaConfig(
        **special, vocab_size=vocab_size, hidden_size=g.width, intermediate_size=g.mlp_dim,
        num_hidden_layers=g.depth, num_attention_heads=g.num_heads,
        num_key_value_heads=g.num_kv_heads, head_dim=g.head_dim, rms_norm_eps=g.eps,
        hidden_act='gelu_pytorch_tanh',
        rope_parameters={'rope_type': 'default', 'rope_theta': g.rope_base},
        attn_implementation='eager')
    return hf.GemmaModel._from_config(config, dtype=dtype)


class HfExpert(nn.Module):
    """The action expert around an HF GemmaModel: action/time projections, optional adaRMS."""

    def __init__(self, cfg, dtype, adarms=True):
        super().__init__()
        w = cfg.expert.width
        self.num_steps = cfg.num_steps
        self.gemma = _gemma_model(cfg.expert, 1, dtype)
        # Linears made in `dtype` (no .to(dtype) on the whole module: it would also cast HF's
        # float32 RoPE inv_freq buffer).
        self.action_in_proj = nn.Linear(cfg.action_dim, w, dtype=dtype)
        self.time_mlp_in = nn.Linear(w, w, dtype=dtype)
        self.time_mlp_out = nn.Linear(w, w, dtype=dtype)
        self.action_out_proj = nn.Linear(w, cfg.action_dim, dtype=dtype)
        self.adarms = adarms
        norms = 2 * cfg.expert.depth + 1 if adarms else 0
        self.modulation = nn.ModuleList(nn.Linear(w, 3 * w, dtype=dtype) for _ in range(norms))
        self._cond, self._gates = None, {}
        if adarms:
            self._hook_adarms()

    def _hook_adarms(self):
        layers = self.gemma.layers
        for i, layer in enumerate(layers):
            layer.input_layernorm.register_forward_hook(self._norm_hook(2 * i, ('attn', i)))
            layer.post_attention_layernorm.register_forward_hook(
                self._norm_hook(2 * i + 1, ('mlp', i)))
            layer.self_attn.register_forward_hook(self._gate_hook(('attn', i)))
            layer.mlp.register_forward_hook(self._gate_hook(('mlp', i)))
        self.gemma.norm.register_forward_hook(self._norm_hook(2 * len(layers), None))

    def _norm_hook(self, index, gate_key):
        def hook(module, args, out):
            mod = self.modulation[index](self._cond).unsqueeze(1)
            scale, shift, gate = mod.chunk(3, dim=-1)
            if gate_key is not None:
                self._gates[gate_key] = gate
            return out * (1 + scale) + shift
        return hook

    def _gate_hook(self, gate_key):
        def hook(module, args, out):
            if isinstance(out, tuple):
                return (out[0] * self._gates[gate_key],) + tuple(out[1:])
            return out * self._gates[gate_key]
        return hook

    def time_condition(self, t):
        emb = posemb_sincos(t, self.time_mlp_in.in_features).to(self.time_mlp_in.weight.dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def velocity(self, x_t, t, prefix_cache, mask, positions):
        self._cond = self.time_condition(t)
        x = self.action_in_proj(x_t)
        if not self.adarms:
            x = x + self._cond[:, None]
        out = self.gemma(inputs_embeds=x, attention_mask=mask, position_ids=positions,
                         past_key_values=copy.deepcopy(prefix_cache), use_cache=True)
        return self.action_out_proj(out.last_hidden_state)

    def forward(self, prefix_cache, prefix_mask, noise):
        """Euler from t=1 (noise) to t=0, each step attending to a copy of the prefix cache."""
        dt = -1.0 / self.num_steps
        x_t = noise.to(self.action_in_proj.weight.dtype)
        allowed, positions = suffix_attention(prefix_mask, x_t.shape[1])
        mask = additive_mask(allowed, x_t.dtype)
        for step in range(self.num_steps):
            t = torch.full((x_t.shape[0],), 1.0 + step * dt, device=x_t.device)
            x_t = x_t + dt * self.velocity(x_t, t, prefix_cache, mask, positions)
        return x_t.float()  # float32 out, as the reference policy returns


def additive_mask(allowed, dtype):
    """Boolean (b, q, k) -> HF eager's additive (b, 1, q, k) mask: 0 where allowed, else min."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)[:, None]


def build_hf_parts(cfg, device='cuda', dtype=torch.bfloat16, adarms=True):
    """The pi0.5 stages as HF modules in one ModuleDict (random weights), on device, eval."""
    with torch.device(device):
        parts = nn.ModuleDict({
            'vision': _vision_model(cfg, dtype),
            'projector': nn.Linear(cfg.vision.width, cfg.llm.width, dtype=dtype),
            'llm': _gemma_model(cfg.llm, cfg.vocab_size, dtype),
            'expert': HfExpert(cfg, dtype, adarms),
        })
    return parts.eval()


def hf_vision(parts, images):
    """uint8 images (b, cams, H, W, 3) -> projected tokens (b, cams * patches, llm width); the
    range mapping is the reference's (to_model_range), on the GPU as in the artifact."""
    b = images.shape[0]
    pixels = to_model_range(images.reshape(-1, *images.shape[-3:])).permute(0, 3, 1, 2)
    pixels = pixels.to(parts['projector'].weight.dtype)
    tokens = parts['projector'](parts['vision'](pixel_values=pixels).last_hidden_state)
    return tokens.reshape(b, -1, tokens.shape[-1])


def hf_prefix(parts, tokens, image_mask, token_ids, token_mask):
    """[image tokens, text embeddings] through the HF Gemma prefix -> (DynamicCache, mask)."""
    llm = parts['llm']
    text = llm.embed_tokens(token_ids)  # GemmaTextScaledWordEmbedding: * sqrt(width)
    x = torch.cat([tokens.to(text.dtype), text], dim=1)
    per_image = tokens.shape[1] // image_mask.shape[1]
    prefix_mask = torch.cat([image_mask.repeat_interleave(per_image, dim=1), token_mask], dim=1)
    allowed = make_attention_mask(prefix_mask, torch.zeros_like(prefix_mask))
    positions = torch.cumsum(prefix_mask.long(), dim=1) - 1
    out = llm(inputs_embeds=x, attention_mask=additive_mask(allowed, x.dtype),
              position_ids=positions, use_cache=True)
    return out.past_key_values, prefix_mask


def hf_sample_actions(parts, images, image_mask, token_ids, token_mask, noise):
    """The whole workload: vision, prefix (KV cache), cfg.num_steps denoise steps."""
    with torch.no_grad():
        tokens = hf_vision(parts, images)
        cache, prefix_mask = hf_prefix(parts, tokens, image_mask, token_ids, token_mask)
        return parts['expert'](cache, prefix_mask, noise)


VISION_RENAMES = (
    ('vision.patch_embed.', 'vision.embeddings.patch_embedding.'),
    ('vision.pos_embed', 'vision.embeddings.position_embedding.weight'),
    ('vision.blocks.', 'vision.encoder.layers.'), ('.norm1.', '.layer_norm1.'),
    ('.norm2.', '.layer_norm2.'), ('.q_proj.', '.self_attn.q_proj.'),
    ('.k_proj.', '.self_attn.k_proj.'), ('.v_proj.', '.self_attn.v_proj.'),
    ('.out_proj.', '.self_attn.out_proj.'), ('.fc1.', '.mlp.fc1.'), ('.fc2.', '.mlp.fc2.'),
    ('vision.post_norm.', 'vision.post_layernorm.'), ('vision.projector.', 'projector.'),
)
GEMMA_RENAMES = (
    ('prefix.embed.', 'llm.embed_tokens.'), ('prefix.layers.', 'llm.layers.'),
    ('prefix.final_norm.', 'llm.norm.'), ('expert.layers.', 'expert.gemma.layers.'),
    ('.input_norm.', '.input_layernorm.'), ('.post_attn_norm.', '.post_attention_layernorm.'),
    ('.attn.', '.self_attn.'),
)


def _hf_name(name, depth):
    """Reference parameter name -> the HF parts' name (adaRMS modulations are renumbered)."""
    parts = name.split('.')
    if name.startswith('expert.layers.') and 'modulation' in name:
        index = 2 * int(parts[2]) + (parts[3] == 'post_attn_norm')
        return f'expert.modulation.{index}.{parts[-1]}'
    if name.startswith('expert.final_norm.modulation.'):
        return f'expert.modulation.{2 * depth}.{parts[-1]}'
    for old, new in VISION_RENAMES if name.startswith('vision.') else GEMMA_RENAMES:
        name = name.replace(old, new)
    return name


def copy_reference_weights(parts, model):
    """Load a lamp_ros Pi05Model's weights into the HF parts (for a parity check).

    The expert's HF RMSNorm weights, which the reference's adaRMS has no counterpart for, are
    zeroed so that (1 + weight) is 1. Needs adarms=True."""
    state = {_hf_name(k, model.cfg.expert.depth): v for k, v in model.state_dict().items()}
    with torch.no_grad():
        missing, unexpected = parts.load_state_dict(state, strict=False)
        for name in missing:
            if name == 'expert.gemma.embed_tokens.weight':
                continue  # unused
            if not (name.startswith('expert.gemma.') and name.endswith('norm.weight')):
                raise KeyError(f'copy_reference_weights: {name} has no reference weight')
            parts.get_parameter(name).zero_()
    if unexpected:
        raise KeyError(f'copy_reference_weights: unused reference weights {unexpected[:5]}')


def hf_eager(cfg, device='cuda', dtype=torch.bfloat16, adarms=True, reference=None):
    """The pi0.5 workload from HF transformers modules, eager -> (fn, info).

    `fn(images, image_mask, token_ids, token_mask, noise)` returns actions
    (b, horizon, action_dim). Weights are random (HF's init) unless `reference`, a lamp_ros
    Pi05Model of the same cfg, is given: then its weights are copied for a parity check."""
    if reference is not None and not adarms:
        raise ValueError('hf_eager: reference weights need adarms=True')
    parts = build_hf_parts(cfg, device, dtype, adarms)
    if reference is not None:
        copy_reference_weights(parts, reference)

    def fn(images, image_mask, token_ids, token_mask, noise):
        return hf_sample_actions(parts, images, image_mask, token_ids, token_mask, noise)

    info = {
        'transformers': _hf().__version__, 'attn_implementation': 'eager',
        'dtype': str(dtype).replace('torch.', ''), 'adarms': adarms,
        'reference_weights': reference is not None,
        'params': sum(p.numel() for p in parts.parameters()),
        'differences': HF_DIFFERENCES + (ADARMS_HOOKS if adarms else PLAIN_RMS),
    }
    fn.parts = parts  # the modules, for a caller that wants them (info stays JSON-able)
    return fn, info


def _synchronize(args):
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            torch.cuda.synchronize(a.device)
            return


CHUNK_BYTES = 15 << 20  # the device tool brings back files of at most 16 MiB


def torch_compile(model, args, mode='max-autotune', cache: str = '', scope: str = 'whole',
                  backend: str = 'inductor'):
    """`torch.compile(model.sample_actions)` -> (fn, info); the first call (compilation) is
    made here with `args` under no_grad, and its wall time is info['compile_s'].
    `backend` other than inductor (gpu_pi05.py --smoke: aot_eager) takes no mode.

    scope 'whole' compiles sample_actions as one program (dynamo unrolls the 10 Euler steps:
    vision, prefix and 10 x 18 expert layers in one graph). scope 'stages' compiles the
    vision encoder, the prefix and the expert's velocity field separately, the velocity once
    for all 10 steps (PyTorch's "regional compilation" recipe for repeated blocks), with
    inductor's CUDA graphs off: the caller captures the whole call as one CUDA graph
    (gpu_pi05.py does). On the H200 the whole-scope max-autotune compile did not finish in
    two 570 s attempts (the second with the first's kernels and autotuning cached).

    `cache` names inductor's portable compile cache (torch.compiler.save_cache_artifacts: the
    compiled graphs with their autotuning choices and kernels), kept xz-compressed as CACHE.000,
    CACHE.001, ... of at most 15 MiB each, with CACHE.json beside them (the cold compile's wall
    time, the sizes, the compression). Where it exists it is loaded first and the compile
    reuses it; otherwise it is written after the compile. Compressed, so that pi05_full's
    (190 MB raw) may come back from a device call and travel to a later one (64 MiB each way)
    instead of being compiled again every session; the compression costs seconds (lzma preset
    1: ~30 MB/s and 12-18x on parts of that cache). A cold max-autotune compile of pi05_full
    takes longer than one 10-minute device call leaves after the other paths, so it runs alone
    first (gpu_pi05.py --compile-only).

    With mode 'max-autotune' (or 'reduce-overhead') inductor replays CUDA graphs whose output
    buffers are reused: clone an output before the next call if it must be kept."""
    if scope not in ('whole', 'stages'):
        raise ValueError(f"torch_compile scope must be 'whole' or 'stages', not {scope!r}")
    if scope == 'stages':
        mode = {'max-autotune': 'max-autotune-no-cudagraphs',
                'reduce-overhead': 'default'}.get(mode, mode)
    info = {'mode': mode, 'scope': scope, 'fullgraph': False, 'torch': torch.__version__}
    if backend != 'inductor':  # dynamo (and AOTAutograd) alone: modes are inductor's
        mode = info['mode'] = None
        info['backend'] = backend
    loaded = bool(cache) and os.path.isfile(f'{cache}.json')
    if loaded:
        data, meta = read_compile_cache(cache)
        torch.compiler.load_cache_artifacts(data)
        info.update(meta)
        info['cache'] = f'loaded ({len(data) / 1e6:.1f} MB)'
    if scope == 'whole':
        compiled = torch.compile(model.sample_actions, mode=mode, fullgraph=False,
                                 backend=backend)
    else:
        compiled = compile_stages(model, mode, backend)
    start = time.perf_counter()
    with torch.no_grad():
        compiled(*args)
    _synchronize(args)
    info['compile_s'] = time.perf_counter() - start
    if cache and not loaded:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            info['cache'] = 'nothing to save'
        else:
            data = saved[0]
            on_gpu = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
            stored = write_compile_cache(cache, data, {
                'cold_compile_s': info['compile_s'], 'torch': torch.__version__, 'mode': mode,
                'provenance': provenance('cuda' if on_gpu else 'cpu')})
            info['cold_compile_s'] = info['compile_s']
            info['cache'] = f'saved ({len(data) / 1e6:.1f} MB, {stored / 1e6:.1f} MB xz)'

    def fn(*call_args):
        return compiled(*call_args)
    return fn, info


def compile_stages(model, mode: str | None, backend: str = 'inductor'):
    """sample_actions of a Pi05Model with its three stages compiled on their own and the
    expert's velocity field compiled once for every Euler step. The model is not changed: the
    expert is a shallow copy (same parameters) whose `velocity` is the compiled one."""
    vision = torch.compile(model.vision, mode=mode, backend=backend)
    prefix = torch.compile(model.prefix, mode=mode, backend=backend)
    expert = copy.copy(model.expert)
    expert.velocity = torch.compile(model.expert.velocity, mode=mode, backend=backend)

    def sample_actions(images, image_mask, token_ids, token_mask, noise):
        k_cache, v_cache, prefix_mask = prefix(vision(images), image_mask, token_ids,
                                               token_mask)
        return expert(k_cache, v_cache, prefix_mask, noise)
    return sample_actions


def write_compile_cache(cache: str, data: bytes, meta: dict) -> int:
    """Write `data` xz-compressed as CACHE.000, ... (CHUNK_BYTES each) and CACHE.json (`meta`
    with the raw and stored sizes) -> the stored bytes. Older chunks of the name go first."""
    stored = lzma.compress(data, format=lzma.FORMAT_XZ, preset=1)
    for part in _chunks(cache):
        os.remove(part)
    for i in range(0, len(stored), CHUNK_BYTES):
        with open(f'{cache}.{i // CHUNK_BYTES:03d}', 'wb') as f:
            f.write(stored[i:i + CHUNK_BYTES])
    with open(f'{cache}.json', 'w', encoding='utf-8') as f:
        json.dump({**meta, 'bytes': len(data), 'stored_bytes': len(stored),
                   'compression': 'xz'}, f)
    return len(stored)


def read_compile_cache(cache: str) -> tuple:
    """CACHE.json and the chunks beside it -> (the cache's bytes, its metadata). Caches saved
    before compression (no 'compression' in the JSON) are read as they are. A missing or short
    chunk is refused with the sizes, not handed to inductor."""
    with open(f'{cache}.json', encoding='utf-8') as f:
        meta = json.load(f)
    raw = b''.join(_read(part) for part in _chunks(cache))
    compression = meta.get('compression')
    want = meta.get('stored_bytes' if compression else 'bytes')
    if want is not None and len(raw) != want:
        raise ValueError(f'compile cache {cache}: its chunks hold {len(raw)} bytes, '
                         f'{cache}.json says {want} (a chunk missing?)')
    if compression == 'xz':
        return lzma.decompress(raw, format=lzma.FORMAT_XZ), meta
    if compression:
        raise ValueError(f'compile cache {cache}: unknown compression {compression!r}')
    return raw, meta


def _read(path: str) -> bytes:
    with open(path, 'rb') as f:
        return f.read()


def _chunks(cache: str) -> list:
    """CACHE.000, CACHE.001, ... in order."""
    folder = os.path.dirname(os.path.abspath(cache))
    name = os.path.basename(cache)
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.startswith(name + '.') and f[len(name) + 1:].isdigit())
