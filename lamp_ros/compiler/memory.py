"""From a graph and its plan to the memory plan the runtime allocates.

The schedule is the execution order: groups in plan order, nodes in graph order inside each.
Only values the runtime itself holds are planned: graph inputs of fixed size, every value a
host node produces, and the outputs of compiled groups. Values inside a compiled group (the KV
cache inside the ONNX/CUDA group) belong to its backend. Raw camera images (the robot decides
their size), strings and scalars are passed through.

Arenas are split by phase: the inference phase may run in a worker thread while control ticks
continue, so the two must never share bytes; episode state gets an arena of its own and lives
for the whole schedule.
"""

from lamp_ros.compiler.memory_plan import BufferRequest, lifetimes_from_schedule, plan_memory


def arena_name(device: str, phase: str) -> str:
    return f'{device}.{phase}'


def memory_plan(graph, plan):
    phase_of = plan.phases
    produced_by_host, group_outputs, schedule = set(), set(), []
    for group in plan.groups:
        for node_id in group.nodes:
            node = graph.node(node_id)
            if group.backend == 'host':
                produced_by_host.update(node.outputs)
        group_outputs.update(group.outputs)

    def plannable(v) -> bool:
        t = graph.values[v]
        materialized = v in graph.inputs or v in produced_by_host or v in group_outputs
        return materialized and t.is_static and t.dtype != 'string' and t.shape != () \
            and t.role != 'state'

    devices, sizes = {}, {}
    for group in plan.groups:
        if group.backend == 'host':
            steps = [graph.node(n) for n in group.nodes]
            for node in steps:
                outs = [v for v in node.outputs if plannable(v)]
                schedule.append((node.id, [v for v in dict.fromkeys(node.inputs)
                                           if plannable(v)], outs))
        else:
            ins = [v for v in group.inputs if plannable(v)]
            schedule.append((group.name, ins, [v for v in group.outputs if plannable(v)]))
        phase = phase_of[group.nodes[0]]
        for _, _, outs in schedule[-len(group.nodes) if group.backend == 'host' else -1:]:
            for v in outs:
                devices[v] = arena_name('cpu', phase)
    for v in graph.inputs:
        if plannable(v):
            consumer_phases = {phase_of[n.id] for n in graph.nodes if v in n.inputs}
            devices[v] = arena_name('cpu', 'tick' if 'tick' in consumer_phases else 'inference')
    for step in schedule:
        for v in (*step[1], *step[2]):
            sizes[v] = graph.values[v].nbytes
    # An input read by both phases (joint state: prompt for inference, clamp reference per tick)
    # is kept in the tick arena and copied by the runtime when it snapshots inference inputs.
    requests = lifetimes_from_schedule(schedule, sizes, devices,
                                       keep_alive=[v for v in graph.outputs if v in sizes])
    last = max(len(schedule) - 1, 0)
    for node in graph.nodes:
        for v in node.state:
            requests.append(BufferRequest(v, max(graph.values[v].nbytes, 1), 0, last,
                                          arena_name('cpu', 'state')))
    return plan_memory(requests)
