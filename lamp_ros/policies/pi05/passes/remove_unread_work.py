"""remove_unread_work: drop what no output of the stage reads.

The prefix stage returns only the K/V cache, so its final norm is dead, and so is everything
of the last layer after K and V: the q projection, attention, o_proj, the residual, the post
attention norm and the MLP. The last layer becomes K/V-only. Exporters would prune most of this
from the exported program too; the pass states it in the graph and drops the dead weights from
the artifact (weights/prefix.safetensors), which an exporter cannot do.
"""

from lamp_ros.policies.pi05.passes.stage_rewrite import parameter_count, rewrite


def _prefix(stage) -> dict:
    before = parameter_count(stage)
    found = {}
    if stage.final_norm is not None:
        stage.final_norm = None
        found['final_norm'] = 1
    last = stage.layers[-1]
    if not last.kv_only:
        attn = last.attn
        merged = len(attn.in_proj.parts) == 1
        attn.in_proj = attn.in_proj.select(('k', 'v'), merge=merged)
        attn.o_proj = last.post_attn_norm = last.mlp = None
        found['kv_only_layers'] = [len(stage.layers) - 1]
        found['removed'] = ['q', 'attention', 'o_proj', 'post_attn_norm', 'mlp']
    if found:
        found['parameters_removed'] = before - parameter_count(stage)
    return found


def remove_unread_work(modules: dict) -> tuple:
    return rewrite(modules, {'prefix': _prefix})
