"""The artifact's ABI: what a caller must feed and may expect, taken from the graph."""


def abi_from_graph(graph, camera_slots, joint_names, rate_hz: float) -> dict:
    return {
        'inputs': {v: graph.values[v].to_dict() for v in graph.inputs},
        'outputs': {v: graph.values[v].to_dict() for v in graph.outputs},
        'state': {v: graph.values[v].to_dict() for n in graph.nodes for v in n.state},
        'camera_slots': list(camera_slots),
        'joint_names': list(joint_names),
        'rate_hz': rate_hz,
    }
