"""The torch.compile baseline with scope 'stages' (bench/baselines.py): the vision encoder, the
prefix and the expert's velocity field compiled on their own, the velocity once for all Euler
steps. Checked on the CPU on the tiny policy (inductor's default mode; the GPU bench uses
max-autotune): same actions as eager, exactly three compiled graphs (a recompile per step
would show as more), and the model left as it was."""

import shutil

import pytest
import torch

from bench import baselines, gpu_pi05
from lamp_ros.policies.pi05.config import get_preset
from lamp_ros.policies.pi05.model import Pi05Model
from lamp_ros.policies.pi05.weights import init_weights


def tiny_inputs(cfg):
    """The bench's synthetic inputs on the CPU, with the last camera missing."""
    x = gpu_pi05.synthetic_inputs(cfg, device='cpu')
    x[1][0, -1] = False
    return x


@pytest.mark.skipif(not (shutil.which('g++') or shutil.which('c++')),
                    reason='inductor needs a C++ compiler on the CPU')
def test_stage_compile_matches_eager_with_one_graph_per_stage():
    cfg = get_preset('pi05_tiny')
    model = Pi05Model(cfg).eval()
    init_weights(model, 0, {})
    x = tiny_inputs(cfg)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    fn, info = baselines.torch_compile(model, x, mode='max-autotune', scope='stages')
    assert info['scope'] == 'stages' and info['mode'] == 'max-autotune-no-cudagraphs'
    with torch.no_grad():
        expected = model.sample_actions(*x)
        torch.testing.assert_close(fn(*x), expected, rtol=1e-4, atol=1e-5)
        noise = torch.randn_like(x[4])  # new values, same shapes: no recompile
        torch.testing.assert_close(fn(*x[:4], noise), model.sample_actions(*x[:4], noise),
                                   rtol=1e-4, atol=1e-5)
    assert torch._dynamo.utils.counters['stats']['unique_graphs'] == 3
    assert 'velocity' not in vars(model.expert)  # the eager model is untouched
    torch._dynamo.reset()


def test_unknown_scope_is_refused():
    with pytest.raises(ValueError, match='scope'):
        baselines.torch_compile(torch.nn.Linear(2, 2), (), scope='layers')
