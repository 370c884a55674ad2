"""What every pi0.5 pass shares: the copy-lower-rewrite loop over stages."""

import copy

import torch

from lamp_ros.compiler.rewrites import PassResult
from lamp_ros.policies.pi05.staged.lower import lower, stage_kind


def rewrite(modules: dict, handlers: dict) -> tuple:
    """Run `handlers[kind](stage) -> details` on a lowered deep copy of each model stage.

    A handler changes the copy in place and says what it did; an empty answer means nothing
    changed, and the caller's module is handed on as it was. The caller's modules are never
    touched (passes run on the eager reference's own modules, which parity later compares to).
    """
    out, details = {}, {}
    for node_id, module in modules.items():
        handler = handlers.get(stage_kind(module))
        if handler is None:
            out[node_id] = module
            continue
        stage = lower(copy.deepcopy(module))
        with torch.no_grad():
            found = handler(stage)
        out[node_id] = stage if found else module
        if found:
            details[node_id] = found
    return out, PassResult(bool(details), details)


def parameter_count(module) -> int:
    return sum(p.numel() for p in module.parameters())
