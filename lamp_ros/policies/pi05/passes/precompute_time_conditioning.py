"""precompute_time_conditioning: the expert's time branch, evaluated once per Euler step.

The flow runs a fixed schedule (t = 1, 1 - 1/n, ..., 1/n), so time_condition(t) and each adaRMS
modulation(cond) are constants of the step: every norm gets a table (steps, 3 * width) of its
scale, shift and gate, plus a row for t = 0 (real-time chunking's committed actions, rtc.py),
and the time MLP and the modulation linears leave the per-step work (and
the weights). The table rows are computed by the stage's own code with batch 1; every batch row
is the same time, so they broadcast.
"""

import torch

from lamp_ros.policies.pi05.passes.stage_rewrite import parameter_count, rewrite
from lamp_ros.policies.pi05.staged.norms import StepAdaRMSNorm


def _precompute(stage) -> dict:
    if stage.time_precomputed:
        return {}
    before = parameter_count(stage)
    device = stage.action_in_proj.weight.device
    norms = stage.norms()
    rows = {i: [] for i in range(len(norms))}
    conds = [stage.condition(step, 1, device) for step in range(stage.cfg.num_steps)]
    conds.append(stage.time_condition(torch.zeros((1,), device=device)))  # t = 0 (rtc.py)
    for cond in conds:
        for i, (owner, attr) in enumerate(norms):
            rows[i].append(getattr(owner, attr).modulation(cond)[0])
    for i, (owner, attr) in enumerate(norms):
        setattr(owner, attr, StepAdaRMSNorm(getattr(owner, attr).eps, torch.stack(rows[i])))
    stage.time_mlp_in = stage.time_mlp_out = None
    stage.time_embedding = None
    return {'steps': stage.cfg.num_steps, 'norms': len(norms),
            'table_values': sum(getattr(o, a).table.numel() for o, a in norms),
            'parameters_removed': before - parameter_count(stage)}


def precompute_time_conditioning(modules: dict) -> tuple:
    return rewrite(modules, {'expert': _precompute})
