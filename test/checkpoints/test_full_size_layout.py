"""LeRobot's stock full-size pi05 (gemma_2b + gemma_300m + SigLIP So400m, bf16 mode): every one
of its 813 tensors is mapped or deliberately skipped, and the model its shapes describe is
lamp's pi05_full. The layout (names, shapes, dtypes) was written by LeRobot 0.6.1 building the
policy on the meta device (scripts/fixtures/make_pi05_checkpoints.py); no weights are needed."""

import json
import os

import torch

from conftest import CHECKPOINTS
from lamp_ros.policies.pi05.checkpoint import keys
from lamp_ros.policies.pi05.checkpoint.reader import map_tensors, model_config, stored_dtype
from lamp_ros.policies.pi05.config import PRESETS
from lamp_ros.policies.pi05.model import Pi05Model

DTYPES = {'float32': 'F32', 'bfloat16': 'BF16'}


def header() -> dict:
    with open(os.path.join(CHECKPOINTS, 'lerobot_pi05_full_keys.json'), encoding='utf-8') as f:
        table = json.load(f)['tensors']
    return {k: (tuple(v['shape']), DTYPES[v['dtype']]) for k, v in table.items()}


def test_every_full_size_tensor_is_mapped_and_the_config_is_pi05_full():
    head = header()
    assert len(head) == 813
    sources, skipped = map_tensors(head, 'model.safetensors')
    assert sorted(keys.strip_prefix(n) for n in skipped) == sorted(keys.UNUSED)
    assert len(sources) + len(skipped) == 813
    config = model_config(head, sources, 'model.safetensors', 'full', ('a', 'b', 'c'), 50, 200,
                          10, stored_dtype(head, sources))
    full = PRESETS['pi05_full']
    assert (config.vision, config.llm, config.expert) == (full.vision, full.llm, full.expert)
    assert (config.vocab_size, config.action_dim, config.dtype) == (257_152, 32, 'bfloat16')
    with torch.device('meta'):
        model = Pi05Model(config)
    params = dict(model.named_parameters())
    assert set(params) == set(sources)
    for name, param in params.items():
        assert tuple(param.shape) == head[sources[name]][0], name
    # the two lm_heads (257,152 rows each) are never read: 0.79 G parameters left out
    left_out = sum(head[n][0][0] * head[n][0][1] for n in skipped)
    assert 0.78e9 < left_out < 0.80e9
