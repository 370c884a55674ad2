"""Read a LeRobot or openpi pi0.5 checkpoint folder: what it holds, checked, without the weights.

`open_checkpoint(folder)` reads the small files (config.json, the processor JSONs, the stats),
the safetensors header (names, shapes, dtypes: no tensor data), and hashes every file. It
returns a `Checkpoint` that says everything the import report prints and the policy needs:
the model's dimensions read from the tensor shapes (config.json names variants, not shapes, and
a fine-tune's names can be wrong), the cameras in token order, the robot's joints, the
normalisation per feature and the prompt format of the code base that trained it. Anything lamp
cannot reproduce exactly is refused here with the file and the reason: a pi0 checkpoint,
relative actions, an unknown processor step, missing or empty stats, a tensor no rule knows.
"""

from dataclasses import dataclass, field
import glob
import hashlib
import json
import math
import os

from lamp_ros.ops.normalize import MODES, Normalizer
from lamp_ros.policies.pi05.checkpoint import keys
from lamp_ros.policies.pi05.config import GemmaConfig, Pi05Config, VisionConfig

FORMATS = ('lerobot', 'openpi')
GEMMA_HEAD_DIM = 256      # every Gemma variant pi0.5 uses (gemma_2b, gemma_300m)
SIGLIP_HEADS = 16         # SigLIP So400m, as LeRobot's and openpi's PaliGemma config builds it
OPENPI_MAX_TOKENS = 200   # openpi's Pi0Config.max_token_len for pi0.5
OPENPI_CAMERAS = ('base_0_rgb', 'left_wrist_0_rgb', 'right_wrist_0_rgb')
LEROBOT_IMAGE_PREFIX = 'observation.images.'
LEROBOT_STEPS_IN = {'rename_observations_processor', 'to_batch_processor',
                    'relative_actions_processor', 'normalizer_processor',
                    'pi05_prepare_state_tokenizer_processor_step', 'tokenizer_processor',
                    'device_processor'}
LEROBOT_STEPS_OUT = {'unnormalizer_processor', 'absolute_actions_processor', 'device_processor'}
LEROBOT_EPS = 1e-8


class CheckpointError(ValueError):
    """A checkpoint lamp cannot import exactly; the message names the file and the reason."""


@dataclass
class Checkpoint:
    format: str
    root: str
    weights_file: str                 # relative to root
    files: dict                       # relative path -> sha256 of every file read
    header: dict                      # checkpoint tensor name -> (shape, dtype)
    sources: dict                     # lamp parameter -> checkpoint tensor name
    skipped: list                     # tensors never read (the lm_heads)
    config: Pi05Config
    state: Normalizer
    actions: Normalizer
    joints: int
    prompt_format: str
    dtype: str                        # the dtype most of the weights are stored in
    notes: list = field(default_factory=list)   # what the report should say besides
    glue: dict = field(default_factory=dict)    # what the format's files say around the model

    def parameters(self) -> int:
        return sum(math.prod(self.header[src][0]) for src in self.sources.values())


def check_tokenizer(tokenizer, ckpt: 'Checkpoint') -> None:
    """The tokenizer must have one piece per embedding row: any other was not trained with it."""
    if tokenizer.vocab_size != ckpt.config.vocab_size:
        raise CheckpointError(
            f'tokenizer {tokenizer.model_path}: {tokenizer.vocab_size} pieces, the checkpoint\'s '
            f'embedding has {ckpt.config.vocab_size} rows: not the tokenizer it was trained with '
            '(pi0.5 uses the PaliGemma tokenizer, 257,152 pieces, from '
            'google/paligemma-3b-pt-224 on the Hugging Face Hub, gated: docs/checkpoints.md)')


def sha256_file(path: str, chunk: int = 1 << 24) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _json(root: str, name: str) -> dict:
    path = os.path.join(root, name)
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f'{path}: missing') from None
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f'{path}: cannot read JSON ({exc})') from exc


def detect_format(root: str) -> str:
    if not os.path.isdir(root):
        raise CheckpointError(f'{root}: not a folder')
    if os.path.isfile(os.path.join(root, 'policy_preprocessor.json')):
        return 'lerobot'
    if os.path.isdir(os.path.join(root, 'assets')) and os.path.isfile(
            os.path.join(root, 'config.json')):
        return 'openpi'
    raise CheckpointError(f'{root}: neither a LeRobot checkpoint (policy_preprocessor.json) nor '
                          'an openpi one (config.json + assets/<asset_id>/norm_stats.json); '
                          'give --format if it is one of them')


def read_header(path: str) -> dict:
    """name -> (shape, dtype) from the safetensors header; a corrupt file is refused."""
    from safetensors import safe_open
    try:
        with safe_open(path, 'np') as f:
            return {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype())
                    for k in f.keys()}
    except FileNotFoundError:
        raise CheckpointError(f'{path}: missing') from None
    except Exception as exc:  # safetensors raises several types for a corrupt header
        raise CheckpointError(f'{path}: not a readable safetensors file ({exc})') from exc


def map_tensors(header: dict, weights: str) -> tuple:
    """(lamp name -> checkpoint name, skipped names); pi0 and unknown tensors refused."""
    sources, skipped, unknown = {}, [], []
    for name in header:
        if keys.is_pi0(name):
            raise CheckpointError(f'{weights}: tensor {name} is pi0\'s (state_proj / plain '
                                  'expert norms): this is a pi0 checkpoint, a different model; '
                                  'lamp imports pi0.5')
        if keys.is_unused(name):
            skipped.append(name)
            continue
        target = keys.lamp_name(name)
        if target is None:
            unknown.append(name)
        elif target in sources:
            raise CheckpointError(f'{weights}: {name} and {sources[target]} both fill {target}')
        else:
            sources[target] = name
    if unknown:
        raise CheckpointError(f'{weights}: {len(unknown)} unexpected tensors, e.g. '
                              f'{unknown[:3]}: not a pi0.5 layout lamp knows')
    if keys.EMBED not in sources:
        head = next((n for n in skipped if keys.strip_prefix(n) == keys.LM_HEAD), None)
        if head is None:
            raise CheckpointError(f'{weights}: no language embedding (embed_tokens) and no '
                                  'lm_head to take it from')
        sources[keys.EMBED] = head  # tied embedding, as LeRobot's loader does
        skipped.remove(head)
    return sources, skipped


def _layers(sources: dict, prefix: str) -> int:
    indices = {int(k[len(prefix):].split('.')[0]) for k in sources if k.startswith(prefix)}
    if indices != set(range(len(indices))):
        raise CheckpointError(f'layers of {prefix[:-1]} are not numbered 0..n-1: '
                              f'{sorted(indices)}')
    return len(indices)


def model_config(header, sources, weights, name, camera_slots, horizon, max_tokens,
                 num_steps, dtype) -> Pi05Config:
    """The Pi05Config the tensor shapes describe; every tensor is checked against it later
    (load.py), so a shape that contradicts the others is refused by name."""
    def shape(param):
        if param not in sources:
            raise CheckpointError(f'{weights}: missing tensor for {param}')
        return header[sources[param]][0]

    patch = shape('vision.patch_embed.weight')
    patches = shape('vision.pos_embed')[0]
    side = math.isqrt(patches)
    if side * side != patches:
        raise CheckpointError(f'{weights}: {patches} position embeddings are not a square grid')
    vwidth = patch[0]
    if vwidth % SIGLIP_HEADS:
        raise CheckpointError(f'{weights}: vision width {vwidth} is not a multiple of SigLIP\'s '
                              f'{SIGLIP_HEADS} heads')
    vision = VisionConfig(image_size=side * patch[2], patch_size=patch[2], width=vwidth,
                          depth=_layers(sources, 'vision.blocks.'),
                          mlp_dim=shape('vision.blocks.0.fc1.weight')[0], num_heads=SIGLIP_HEADS)

    def gemma(stage, width):
        q, k = shape(f'{stage}.layers.0.attn.q_proj.weight'), shape(
            f'{stage}.layers.0.attn.k_proj.weight')
        for rows, what in ((q[0], 'q_proj'), (k[0], 'k_proj')):
            if rows % GEMMA_HEAD_DIM:
                raise CheckpointError(f'{weights}: {stage} {what} has {rows} rows, not a '
                                      f'multiple of Gemma\'s head_dim {GEMMA_HEAD_DIM}')
        return GemmaConfig(width=width, depth=_layers(sources, f'{stage}.layers.'),
                           mlp_dim=shape(f'{stage}.layers.0.mlp.gate_proj.weight')[0],
                           num_heads=q[0] // GEMMA_HEAD_DIM,
                           num_kv_heads=k[0] // GEMMA_HEAD_DIM, head_dim=GEMMA_HEAD_DIM)

    embed = shape('prefix.embed.weight')
    action_in = shape('expert.action_in_proj.weight')
    try:
        return Pi05Config(name=name, vision=vision, llm=gemma('prefix', embed[1]),
                          expert=gemma('expert', action_in[0]), vocab_size=embed[0],
                          camera_slots=tuple(camera_slots), max_token_len=int(max_tokens),
                          action_horizon=int(horizon), action_dim=action_in[1],
                          num_steps=int(num_steps), dtype=dtype)
    except ValueError as exc:
        raise CheckpointError(f'{weights}: {exc}') from exc


def stored_dtype(header: dict, sources: dict) -> str:
    """The dtype most parameters are stored in (float32 or bfloat16)."""
    names = {'F32': 'float32', 'BF16': 'bfloat16', 'F16': 'float16'}
    counts = {}
    for src in sources.values():
        shape, dtype = header[src]
        if dtype not in names:
            raise CheckpointError(f'tensor {src}: dtype {dtype} is not a float type lamp loads')
        counts[names[dtype]] = counts.get(names[dtype], 0) + math.prod(shape)
    return max(counts, key=counts.get)


def _normalizer(mode: str, stats: dict, convention: str, where: str, dim: int) -> Normalizer:
    mode = mode.lower()
    if mode not in MODES:
        raise CheckpointError(f'{where}: normalisation mode {mode!r}; lamp knows '
                              f'{", ".join(m.upper() for m in MODES)}')
    needed = MODES[mode]
    missing = [s for s in needed if s not in stats or len(stats[s]) == 0]
    if missing:
        raise CheckpointError(f'{where}: {mode.upper()} needs the stats {list(needed)}; '
                              f'missing or empty: {missing} (some published checkpoints ship '
                              'empty normaliser features: compute the stats on the training '
                              'data and add them)')
    try:
        out = Normalizer(mode, {s: stats[s] for s in needed}, convention)
    except ValueError as exc:
        raise CheckpointError(f'{where}: {exc}') from exc
    if out.dim is not None and out.dim != dim:
        raise CheckpointError(f'{where}: stats have {out.dim} values, the feature has {dim}')
    return out


def _read_stats(path: str, feature: str) -> dict:
    from safetensors.numpy import load_file
    try:
        tensors = load_file(path)
    except FileNotFoundError:
        raise CheckpointError(f'{path}: missing') from None
    except Exception as exc:
        raise CheckpointError(f'{path}: not a readable safetensors file ({exc})') from exc
    prefix = feature + '.'
    return {k[len(prefix):]: v.reshape(-1) for k, v in tensors.items() if k.startswith(prefix)}


def _steps(root: str, name: str, known: set) -> dict:
    steps = _json(root, name).get('steps', [])
    out = {}
    for step in steps:
        registry = step.get('registry_name')
        if registry not in known:
            raise CheckpointError(f'{os.path.join(root, name)}: unknown processor step '
                                  f'{registry!r}; lamp reproduces {sorted(known)} exactly and '
                                  'would silently skip anything else')
        out[registry] = step
    return out


def read_lerobot(root: str, joint_names=None) -> tuple:
    config = _json(root, 'config.json')
    kind = config.get('type')
    if kind != 'pi05':
        raise CheckpointError(f'{os.path.join(root, "config.json")}: type {kind!r}; lamp imports '
                              'pi0.5 (type "pi05") only' + (
                                  ': pi0 is a different model (state_proj, no adaRMS)'
                                  if kind == 'pi0' else ''))
    if config.get('use_relative_actions'):
        raise CheckpointError(f'{os.path.join(root, "config.json")}: use_relative_actions is on; '
                              'lamp does not yet add the state back per joint as LeRobot does, '
                              'and an absolute-action deployment of it would be wrong')
    features = config.get('input_features') or {}
    cameras = [k[len(LEROBOT_IMAGE_PREFIX):] for k, v in features.items()
               if v.get('type') == 'VISUAL' and k.startswith(LEROBOT_IMAGE_PREFIX)]
    if not cameras:
        raise CheckpointError(f'{root}/config.json: no VISUAL input features')
    state_dim = (features.get('observation.state') or {}).get('shape', [None])[0]
    action_dim = ((config.get('output_features') or {}).get('action') or {}).get(
        'shape', [None])[0]
    if not state_dim or not action_dim:
        raise CheckpointError(f'{root}/config.json: observation.state and action features with '
                              'shapes are needed')
    if state_dim != action_dim:
        raise CheckpointError(f'{root}/config.json: state has {state_dim} dims, actions '
                              f'{action_dim}; lamp commands the joints it reads')
    mapping = config.get('normalization_mapping') or {}
    if mapping.get('VISUAL', 'IDENTITY') != 'IDENTITY':
        raise CheckpointError(f'{root}/config.json: VISUAL normalisation '
                              f'{mapping["VISUAL"]}; pi0.5 images are mapped to [-1, 1] only')
    pre = _steps(root, 'policy_preprocessor.json', LEROBOT_STEPS_IN)
    post = _steps(root, 'policy_postprocessor.json', LEROBOT_STEPS_OUT)
    for steps, name in ((pre, 'relative_actions_processor'),
                        (post, 'absolute_actions_processor')):
        if steps.get(name, {}).get('config', {}).get('enabled'):
            raise CheckpointError(f'{root}: {name} is enabled (relative actions); lamp does not '
                                  'yet reproduce it')
    if (pre.get('rename_observations_processor', {}).get('config', {}).get('rename_map')):
        raise CheckpointError(f'{root}/policy_preprocessor.json: a rename_map; lamp names '
                              'cameras by the config\'s input features only')
    for needed in ('normalizer_processor', 'pi05_prepare_state_tokenizer_processor_step',
                   'tokenizer_processor'):
        if needed not in pre:
            raise CheckpointError(f'{root}/policy_preprocessor.json: no {needed} step')
    if 'unnormalizer_processor' not in post:
        raise CheckpointError(f'{root}/policy_postprocessor.json: no unnormalizer_processor')
    tok = pre['tokenizer_processor'].get('config', {})
    if (tok.get('padding_side', 'right'), tok.get('padding', 'max_length')) != (
            'right', 'max_length'):
        raise CheckpointError(f'{root}/policy_preprocessor.json: tokenizer padding '
                              f'{tok.get("padding")!r} on the {tok.get("padding_side")!r}; '
                              'pi0.5 pads right to max_length')
    if not tok.get('truncation', True):
        raise CheckpointError(f'{root}/policy_preprocessor.json: tokenizer truncation off')
    files = {}
    norms = []
    for steps, registry, feature, kind in (
            (pre, 'normalizer_processor', 'observation.state', 'STATE'),
            (post, 'unnormalizer_processor', 'action', 'ACTION')):
        step = steps[registry]
        eps = step.get('config', {}).get('eps', LEROBOT_EPS)
        if eps != LEROBOT_EPS:
            raise CheckpointError(f'{root}: {registry} eps {eps}; lamp reproduces LeRobot\'s '
                                  f'default {LEROBOT_EPS}')
        state_file = step.get('state_file')
        if not state_file:
            raise CheckpointError(f'{root}: {registry} names no state_file (its stats)')
        files[state_file] = os.path.join(root, state_file)
        mode = step.get('config', {}).get('norm_map', mapping).get(kind, 'IDENTITY')
        stats = _read_stats(files[state_file], feature)
        norms.append(_normalizer(mode, stats, 'lerobot', f'{root}/{state_file} {feature}',
                                 action_dim))
    resolution = config.get('image_resolution', [224, 224])
    glue = {'cameras': cameras, 'joints': action_dim, 'horizon': config.get('chunk_size', 50),
            'max_tokens': tok.get('max_length', config.get('tokenizer_max_length', 200)),
            'num_steps': config.get('num_inference_steps', 10),
            'image_size': resolution[0], 'prompt_format': 'lerobot',
            'tokenizer_name': tok.get('tokenizer_name'),
            'variants': (config.get('paligemma_variant'), config.get('action_expert_variant')),
            'precision': config.get('dtype', 'float32')}
    notes = []
    if config.get('empty_cameras'):
        notes.append(f'empty_cameras {config["empty_cameras"]}: image slots LeRobot always masks '
                     'out; masked tokens change nothing, so the artifact leaves them out')
    return 'model.safetensors', files, norms[0], norms[1], glue, notes


def openpi_norm_stats(path: str, joints: int | None = None) -> tuple:
    """(state, actions) Normalizers from an openpi norm_stats.json (quantiles, openpi's eps);
    `joints`: the count they must cover."""
    stats = _json(os.path.dirname(path), os.path.basename(path)).get('norm_stats')
    if not isinstance(stats, dict) or not stats.get('state') or not stats.get('actions'):
        raise CheckpointError(f'{path}: norm_stats.state and norm_stats.actions are needed '
                              '(missing or empty)')
    dims = {k: len(stats[k].get('q01') or []) for k in ('state', 'actions')}
    if dims['state'] != dims['actions']:
        raise CheckpointError(f'{path}: state stats have {dims["state"]} dims, actions '
                              f'{dims["actions"]}; lamp commands the joints it reads')
    if joints is not None and dims['state'] != joints:
        raise CheckpointError(f'{path}: stats for {dims["state"]} dims, the robot has {joints} '
                              'joints')
    return tuple(_normalizer('quantiles', stats[k], 'openpi', f'{path} {k}', dims['state'])
                 for k in ('state', 'actions'))


def read_openpi(root: str, asset_id: str | None = None) -> tuple:
    config = _json(root, 'config.json')
    assets = sorted(d for d in os.listdir(os.path.join(root, 'assets'))
                    if os.path.isdir(os.path.join(root, 'assets', d)))
    if asset_id is None:
        if len(assets) != 1:
            raise CheckpointError(f'{root}/assets: {len(assets)} asset folders {assets}; name one '
                                  'with --asset-id')
        asset_id = assets[0]
    rel = os.path.join('assets', asset_id, 'norm_stats.json')
    state, actions = openpi_norm_stats(os.path.join(root, rel))
    joints = state.dim
    glue = {'cameras': list(OPENPI_CAMERAS), 'joints': joints,
            'horizon': config.get('action_horizon', 50), 'max_tokens': OPENPI_MAX_TOKENS,
            'num_steps': 10, 'image_size': 224, 'prompt_format': 'openpi',
            'tokenizer_name': None, 'asset_id': asset_id,
            'variants': (config.get('paligemma_variant'), config.get('action_expert_variant')),
            'precision': config.get('precision', 'float32')}
    return 'model.safetensors', {rel: os.path.join(root, rel)}, state, actions, glue, []


VARIANT_WIDTHS = {'gemma_2b': 2048, 'gemma_300m': 1024}


def open_checkpoint(root: str, fmt: str | None = None, asset_id: str | None = None,
                    name: str | None = None) -> Checkpoint:
    """Read and check a checkpoint folder (no tensor data is read)."""
    root = os.path.abspath(root)
    fmt = fmt or detect_format(root)
    if fmt not in FORMATS:
        raise CheckpointError(f'format {fmt!r}; known: {", ".join(FORMATS)}')
    if fmt == 'lerobot':
        weights, extra, state, actions, glue, notes = read_lerobot(root)
    else:
        weights, extra, state, actions, glue, notes = read_openpi(root, asset_id)
    weights_path = os.path.join(root, weights)
    header = read_header(weights_path)
    sources, skipped = map_tensors(header, weights_path)
    dtype = stored_dtype(header, sources)
    config = model_config(header, sources, weights_path, name or os.path.basename(root),
                          glue['cameras'], glue['horizon'], glue['max_tokens'],
                          glue['num_steps'], dtype)
    if config.vision.image_size != glue['image_size']:
        raise CheckpointError(f'{weights_path}: the vision tensors are for '
                              f'{config.vision.image_size} px images, the config says '
                              f'{glue["image_size"]}')
    if glue['joints'] > config.action_dim:
        raise CheckpointError(f'{root}: {glue["joints"]} joints, more than the model\'s action '
                              f'dim {config.action_dim}')
    for variant, gemma in zip(glue['variants'], (config.llm, config.expert)):
        if variant in VARIANT_WIDTHS and VARIANT_WIDTHS[variant] != gemma.width:
            notes.append(f'config.json names {variant} (width {VARIANT_WIDTHS[variant]}); the '
                         f'tensors have width {gemma.width}: the tensors are used')
    files = {weights: sha256_file(weights_path)}
    files.update({rel: sha256_file(path) for rel, path in extra.items()})
    for json_name in sorted(glob.glob(os.path.join(root, '*.json'))):
        files[os.path.basename(json_name)] = sha256_file(json_name)
    return Checkpoint(fmt, root, weights, dict(sorted(files.items())), header, sources,
                      sorted(skipped), config, state, actions, glue['joints'],
                      glue['prompt_format'], dtype, notes, glue)
