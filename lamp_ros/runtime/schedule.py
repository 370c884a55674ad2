"""The order an inference runs its groups in: a two-phase group's first phase launched as soon
as the groups that make its inputs are done, the other host groups run while the GPU works.

A runner with `early_inputs` (the cuda backend when its first stage is captured apart,
backends/cuda/graph_phases.py) has `start(feeds)`, which copies those inputs and launches without
waiting, and `finish(feeds)`, which copies the rest, launches the rest and waits. Everything
else is `run(feeds)`. The steps stay a topological order of the plan's groups: the groups an
early input needs (and the groups those need) move ahead of the others, the others keep their
plan order.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    action: str      # 'run', 'start' or 'finish'
    group: object    # the plan's group
    runner: object


def _needed(runners, index: int, values) -> set:
    """Indices of the groups before `index` that make `values`, and of the groups they need."""
    maker = {v: j for j, (g, _) in enumerate(runners[:index]) for v in g.outputs}
    needed, todo = set(), [maker[v] for v in values if v in maker]
    while todo:
        j = todo.pop()
        if j not in needed:
            needed.add(j)
            todo.extend(maker[v] for v in runners[j][0].inputs if v in maker)
    return needed


def inference_steps(runners, overlap: bool = True) -> list:
    """runners: [(group, runner)] in plan order -> [Step]. Without `overlap`, or without a
    two-phase runner, every group is one 'run' in plan order. Only the first two-phase runner is
    split (one cuda group per inference in every spec so far); later ones run whole."""
    plain = [Step('run', g, r) for g, r in runners]
    if not overlap:
        return plain
    for i, (group, runner) in enumerate(runners):
        early = tuple(getattr(runner, 'early_inputs', ()) or ())
        if not early:
            continue
        needed = _needed(runners, i, early)
        return ([plain[j] for j in range(i) if j in needed] + [Step('start', group, runner)]
                + [plain[j] for j in range(i) if j not in needed]
                + [Step('finish', group, runner)] + plain[i + 1:])
    return plain
