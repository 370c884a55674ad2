"""From a graph and its plan to the memory plan: every statically sized value gets a lifetime
(from the node schedule) and an offset in its device's arena.

Values of symbolic size (raw camera images, whose size the robot decides) and strings are not
planned: the runtime receives them from outside. Episode state lives for the whole schedule,
since it outlives every tick.
"""

from lamp_ros.compiler.memory_plan import BufferRequest, lifetimes_from_schedule, plan_memory


def memory_plan(graph, plan):
    schedule, sizes, devices = [], {}, {}
    group_device = {n: g.device for g in plan.groups for n in g.nodes}
    for node in graph.nodes:
        schedule.append((node.id, list(dict.fromkeys(node.inputs)), list(node.outputs)))
        for v in node.outputs:
            devices[v] = group_device[node.id] if graph.node(node.id).kind == 'model' else 'cpu'
    plannable = {v for v, t in graph.values.items()
                 if t.is_static and t.dtype != 'string' and t.role != 'state'}
    for v in plannable:
        sizes[v] = graph.values[v].nbytes
    filtered = [(step, [v for v in ins if v in plannable], [v for v in outs if v in plannable])
                for step, ins, outs in schedule]
    requests = lifetimes_from_schedule(filtered, sizes, devices,
                                       keep_alive=[v for v in graph.outputs if v in plannable])
    last = len(schedule) - 1
    for node in graph.nodes:
        for v in node.state:
            requests.append(BufferRequest(v, max(graph.values[v].nbytes, 1), 0, last, 'cpu'))
    return plan_memory(requests)
