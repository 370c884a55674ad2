"""Cut the graph into groups: a backend per node (with fallbacks), then acyclic fusion.

Each node gets the backend the spec asks for its op (or `default`) if that backend supports it,
else the first supporting fallback; the choice and its reason are recorded. Then nodes joined by
an edge fuse into one group when they share backend, precision, device and phase, unless the
spec splits after the producer or the merge would make the group graph cyclic (torch.fx's
CapabilityBasedPartitioner rule). The phase separates what runs once per inference (everything
upstream of the chunker's `chunk` input) from what runs every control tick, so the runtime can
skip inference groups on ticks where the chunker still has a plan.
"""

from dataclasses import dataclass

from lamp_ros.backends import get_backend
from lamp_ros.artifact.plan import GroupSpec
from lamp_ros.graph.graph import INPUT

PRECISION_OF_BACKEND_DEFAULT = 'fp32'


@dataclass(frozen=True)
class Assignment:
    backend: str
    precision: str
    device: str
    reason: str
    fallback_from: str = ''


def inference_nodes(graph) -> set:
    """Nodes upstream of the chunker's chunk input (all nodes if there is no chunker)."""
    chunkers = [n for n in graph.nodes if n.op == 'chunker']
    if not chunkers:
        return {n.id for n in graph.nodes}
    producer = graph.producers()
    chunk_inputs = [v for v, p in zip(chunkers[0].inputs, chunkers[0].ports) if p == 'chunk']
    todo, seen = [producer[v] for v in chunk_inputs], set()
    while todo:
        node_id = todo.pop()
        if node_id == INPUT or node_id in seen:
            continue
        seen.add(node_id)
        todo += [producer[v] for v in graph.node(node_id).inputs]
    return seen


def assign(graph, spec) -> dict:
    """node id -> Assignment, honouring the spec's backend, precision and fallbacks."""
    out = {}
    for node in graph.nodes:
        choice = spec.choice(node.op)
        tried = []
        for backend in (choice.backend, *choice.fallback):
            ok, why = get_backend(backend).supports(node)
            if ok:
                reason = choice.reason or why
                if tried:
                    reason = f'fallback: {"; ".join(tried)}; {why}'
                precision = choice.precision if backend != 'host' else 'fp32'
                out[node.id] = Assignment(backend, precision,
                                          get_backend(backend).device_for(spec.target), reason,
                                          choice.backend if tried else '')
                break
            tried.append(f'{backend}: {why}')
        else:
            wanted = [choice.backend, *choice.fallback]
            raise ValueError(f'stages.{node.op}: no backend of {wanted} can run node '
                             f'{node.id!r} ({"; ".join(tried)})')
    return out


def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _acyclic(graph, parent) -> bool:
    producer = graph.producers()
    edges = {}
    for node in graph.nodes:
        dst = _find(parent, node.id)
        for v in node.inputs:
            if producer[v] != INPUT:
                src = _find(parent, producer[v])
                if src != dst:
                    edges.setdefault(src, set()).add(dst)
    state = {}

    def visit(g):  # iterative DFS would be longer; graphs here have tens of groups
        state[g] = 1
        for nxt in edges.get(g, ()):
            if state.get(nxt) == 1 or (nxt not in state and not visit(nxt)):
                return False
        state[g] = 2
        return True
    return all(visit(g) for g in {_find(parent, n.id) for n in graph.nodes} if g not in state)


def partition(graph, spec, assignments: dict) -> list:
    """Groups (GroupSpec without build metadata) in an executable order."""
    phase = {n: 'inference' for n in inference_nodes(graph)}
    key = {n.id: (assignments[n.id].backend, assignments[n.id].precision,
                  assignments[n.id].device, phase.get(n.id, 'tick')) for n in graph.nodes}
    parent = {n.id: n.id for n in graph.nodes}
    producer = graph.producers()
    split_after = set(spec.fusion.get('split_after', []))
    if spec.fusion.get('fuse_adjacent', True):
        for node in graph.nodes:
            for v in node.inputs:
                src = producer[v]
                if src == INPUT or src in split_after or key[src] != key[node.id]:
                    continue
                a, b = _find(parent, src), _find(parent, node.id)
                if a == b:
                    continue
                saved = dict(parent)
                parent[b] = a
                if not _acyclic(graph, parent):
                    parent.clear()
                    parent.update(saved)
    members = {}
    for node in graph.nodes:  # topological order: members stay ordered
        members.setdefault(_find(parent, node.id), []).append(node.id)
    groups = _order_groups(graph, parent, members)
    consumers = {}
    for node in graph.nodes:
        for v in node.inputs:
            consumers.setdefault(v, set()).add(_find(parent, node.id))
    side = set(spec.fusion.get('side_stream', []))
    unknown = sorted(side - {n.id for n in graph.nodes})
    if unknown:
        raise ValueError(f'fusion.side_stream: {unknown} are not nodes of the graph')
    specs = []
    for i, root in enumerate(groups):
        nodes = members[root]
        produced = {v for n in nodes for v in graph.node(n).outputs}
        inputs = []
        for n in nodes:
            for v in graph.node(n).inputs:
                if v not in produced and v not in inputs:
                    inputs.append(v)
        outputs = [v for n in nodes for v in graph.node(n).outputs
                   if v in graph.outputs or consumers.get(v, set()) - {root}]
        a = assignments[nodes[0]]
        first = nodes[0] if len(nodes) == 1 else f'{nodes[0]}..{nodes[-1]}'
        reasons = sorted({assignments[n].reason for n in nodes})
        specs.append(GroupSpec(
            name=f'g{i:02d}_{a.backend}', backend=a.backend, precision=a.precision,
            device=a.device, nodes=tuple(nodes), inputs=tuple(inputs), outputs=tuple(outputs),
            reason=f'{first} ({key[nodes[0]][3]}): ' + ' | '.join(reasons),
            side_stages=_side_stages(f'g{i:02d}_{a.backend}', a.backend, nodes, side)))
    return specs


def _side_stages(group: str, backend: str, nodes, side: set) -> tuple:
    """The group's members named in fusion.side_stream; refused where no second stream exists
    (a backend other than cuda) or where it would leave the capture stream nothing to run."""
    chosen = tuple(n for n in nodes if n in side)
    if chosen and backend != 'cuda':
        raise ValueError(f'fusion.side_stream: {list(chosen)} run in group {group} on backend '
                         f'{backend}; only the cuda backend captures stages on a second stream')
    if chosen and len(chosen) == len(nodes):
        raise ValueError(f'fusion.side_stream: {list(chosen)} are every stage of group {group}; '
                         f'a side stream runs next to stages left on the capture stream')
    return chosen


def _order_groups(graph, parent, members) -> list:
    """Topological order of groups, ties broken by their first node's position."""
    position = {n.id: i for i, n in enumerate(graph.nodes)}
    producer = graph.producers()
    deps = {g: set() for g in members}
    for g, nodes in members.items():
        for n in nodes:
            for v in graph.node(n).inputs:
                if producer[v] != INPUT and _find(parent, producer[v]) != g:
                    deps[g].add(_find(parent, producer[v]))
    order, done = [], set()
    while len(order) < len(members):
        ready = [g for g in members if g not in done and deps[g] <= done]
        g = min(ready, key=lambda g: position[members[g][0]])
        order.append(g)
        done.add(g)
    return order


def phases(graph) -> dict:
    inference = inference_nodes(graph)
    return {n.id: 'inference' if n.id in inference else 'tick' for n in graph.nodes}
