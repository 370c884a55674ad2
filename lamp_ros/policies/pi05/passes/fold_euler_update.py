"""fold_euler_update: x + dt * (W h + b) becomes x + ((dt W) h + dt b).

The Euler step's scalar moves into the expert's output projection (weights scaled in float64),
so each step adds the projection's output directly: one multiply less per step and, on a GPU,
a residual add that fits a GEMM epilogue.
"""

from lamp_ros.policies.pi05.passes.stage_rewrite import rewrite


def _fold(stage) -> dict:
    if stage.euler_folded:
        return {}
    proj = stage.action_out_proj
    proj.weight.copy_((proj.weight.double() * stage.dt).to(proj.weight.dtype))
    if proj.bias is not None:
        proj.bias.copy_((proj.bias.double() * stage.dt).to(proj.bias.dtype))
    stage.euler_folded = True
    return {'dt': stage.dt, 'steps': stage.cfg.num_steps, 'scaled': ['action_out_proj']}


def fold_euler_update(modules: dict) -> tuple:
    return rewrite(modules, {'expert': _fold})
