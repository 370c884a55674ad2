"""Coverage of a build plan: how much of the graph each backend runs and what fell back."""


def coverage(graph, assignments: dict) -> dict:
    """Nodes and ops per backend (a model stage counts its op-level subgraph), fallbacks."""
    table = {}
    for node in graph.nodes:
        a = assignments[node.id]
        row = table.setdefault(a.backend, {'nodes': 0, 'ops': 0, 'node_ids': []})
        row['nodes'] += 1
        row['ops'] += len(node.subgraph.ops) if node.subgraph else 1
        row['node_ids'].append(node.id)
    total_ops = sum(r['ops'] for r in table.values())
    for row in table.values():
        row['ops_pct'] = round(100.0 * row['ops'] / total_ops, 2) if total_ops else 0.0
    fallbacks = [{'node': n, 'wanted': a.fallback_from, 'got': a.backend, 'reason': a.reason}
                 for n, a in assignments.items() if a.fallback_from]
    return {'backends': table, 'fallbacks': fallbacks, 'total_nodes': len(graph.nodes),
            'total_ops': total_ops}
