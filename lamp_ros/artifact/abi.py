"""The artifact's ABI: what a caller must feed and may expect, from the graph and the policy's
declared interface (observation.PolicyInterface), and the robot the spec names (spec/robot.py):
its joints name the state and action vectors, its cameras say what the node subscribes to."""


def abi_from_graph(graph, interface, rate_hz: float, robot=None) -> dict:
    abi = {
        'inputs': {v: graph.values[v].to_dict() for v in graph.inputs},
        'outputs': {v: graph.values[v].to_dict() for v in graph.outputs},
        'state': {v: graph.values[v].to_dict() for n in graph.nodes for v in n.state},
        'camera_slots': list(interface.camera_slots),
        'camera_sizes': {k: list(v) for k, v in interface.camera_sizes.items()},
        'joint_names': list(robot.joint_names if robot else interface.joint_names),
        'prompt': bool(interface.prompt),
        'rate_hz': rate_hz,
    }
    if robot is not None:
        abi['robot'] = robot.to_dict()
    return abi
