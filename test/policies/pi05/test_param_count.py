"""Parameter counts from the config alone: published sizes, and agreement with the modules."""

import pytest

from lamp_ros.policies.pi05.config import get_preset
from lamp_ros.policies.pi05.param_count import param_counts
from lamp_ros.policies.pi05.model import Pi05Model


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize('component,expected', [
    ('vision', 414e6),    # SigLIP So400m/14 + projector
    ('llm', 1.98e9),      # Gemma 2B without the embedding table
    ('expert', 311e6),    # Gemma 300M without adaRMS modulation
])
def test_full_preset_sizes_within_3_percent(component, expected):
    counts = param_counts(get_preset('pi05_full'))
    assert abs(counts[component] - expected) / expected < 0.03, counts[component]


def test_full_preset_reports_adarms_separately():
    counts = param_counts(get_preset('pi05_full'))
    # 37 modulation layers Linear(1024 -> 3072): (2 per layer x 18 + final norm).
    assert counts['expert_adarms'] == 37 * (1024 * 3072 + 3072)
    assert counts['embedding'] == 257_152 * 2048


def test_formulas_match_the_real_modules_on_tiny():
    cfg = get_preset('pi05_tiny')
    model = Pi05Model(cfg)
    counts = param_counts(cfg)
    assert counts['vision'] == _numel(model.vision)
    assert counts['llm'] + counts['embedding'] == _numel(model.prefix)
    assert (counts['expert'] + counts['expert_adarms'] + counts['expert_io']
            == _numel(model.expert))
    assert counts['total'] == _numel(model)
