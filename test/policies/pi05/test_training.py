"""Training the pi0.5-shaped policy (policies/pi05/training.py): the flow-matching loss with
real-time chunking's delays, per-action flow times, and reproducible results."""

from dataclasses import replace

import numpy as np
import torch

from lamp_ros.ops.normalize import Normalizer
from lamp_ros.ops.tokenizer import Tokenizer
from lamp_ros.policies.pi05 import assets
from lamp_ros.policies.pi05.checkpoint.write import lerobot_heads
from lamp_ros.policies.pi05.config import get_preset
from lamp_ros.policies.pi05.model import Pi05Model
from lamp_ros.policies.pi05.policy import GlueConfig, Pi05Policy, RobotIO
from lamp_ros.policies.pi05.training import learning_rate, train, TrainConfig
from lamp_ros.policies.pi05.weights import init_weights
from lamp_ros.sim.demonstrations import collect

MAX_STEP = [0.15] * 6 + [0.01]
LIMITS = ([-2.8] * 6 + [0.0], [2.8] * 6 + [0.08])


def _policy(demos, seed: int = 0) -> Pi05Policy:
    config = lerobot_heads(replace(get_preset('pi05_tiny'), max_token_len=64))
    model = Pi05Model(config)
    init_weights(model, seed)
    q, a = demos.q, demos.actions[:, 0]
    norms = [Normalizer('quantiles', {'q01': np.quantile(x, 0.01, 0),
                                      'q99': np.quantile(x, 0.99, 0)}, 'lerobot') for x in (q, a)]
    return Pi05Policy(config, model, Tokenizer(assets.tokenizer_path()),
                      RobotIO(tuple(f'joint{i}' for i in range(7)), *norms),
                      GlueConfig(prompt_format='lerobot'))


def test_one_flow_time_per_action_equals_one_per_chunk_when_they_agree():
    model = Pi05Model(get_preset('pi05_tiny')).eval()
    init_weights(model, 1)
    g = torch.Generator().manual_seed(0)
    b, h, d = 2, 50, 32
    x = torch.randn(b, h, d, generator=g)
    k = torch.randn(2, b, 10, 1, 32, generator=g)
    v = torch.randn(2, b, 10, 1, 32, generator=g)
    mask = torch.ones(b, 10, dtype=torch.bool)
    t = torch.tensor([0.3, 0.8])
    with torch.no_grad():
        per_chunk = model.expert.velocity(x, t, k, v, mask)
        per_action = model.expert.velocity(x, t[:, None].expand(b, h), k, v, mask)
        mixed = model.expert.velocity(x, torch.where(torch.arange(h) < 5, 0.0, t[:, None]),
                                      k, v, mask)
    torch.testing.assert_close(per_action, per_chunk, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(mixed[:, :5], per_chunk[:, :5])   # the prefix's time counts


def _batches(demos, size, seed):
    rng = np.random.default_rng(seed)
    while True:
        idx = rng.integers(0, len(demos), size)
        yield [demos.observation(int(i)) for i in idx], demos.actions[idx]


def test_training_is_reproducible_from_its_seed_and_lowers_the_loss():
    demos = collect(2, 3, 22.0, MAX_STEP, 50, LIMITS, seconds=2.0)
    cfg = TrainConfig(steps=6, batch_size=2, lr=1e-3, warmup_steps=1, max_delay=8, seed=0)
    runs = []
    for seed in (0, 0, 1):
        policy = _policy(demos)
        losses = train(policy, _batches(demos, 2, 5), replace(cfg, seed=seed))
        runs.append((losses, policy.model.state_dict()))
    (l0, w0), (l1, w1), (l2, w2) = runs
    assert l0 == l1 and all(torch.equal(w0[k], w1[k]) for k in w0)
    assert l0 != l2
    assert np.mean(l0[-2:]) < l0[0]


def test_the_learning_rate_warms_up_then_decays_to_a_tenth():
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1e-3)
    rates = [learning_rate(s, cfg) for s in range(100)]
    assert rates[0] == 1e-4 and abs(rates[9] - 1e-3) < 1e-12
    assert all(a >= b for a, b in zip(rates[10:], rates[11:]))
    assert abs(learning_rate(100, cfg) - 1e-4) < 1e-12
