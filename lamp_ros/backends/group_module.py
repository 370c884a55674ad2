"""Compile side, shared by the ONNX, TensorRT and CUDA backends: a group of model stages as one
nn.Module that runs the stages in graph order over named values, so that one export captures
the whole group and its internal values (e.g. the KV cache) never leave the device."""


def group_module(graph, group, modules):
    """One nn.Module running the group's model stages in order over named values."""
    from torch import nn

    class GroupModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.stages = nn.ModuleDict({n: modules[n] for n in group.nodes})

        def forward(self, *inputs):
            env = dict(zip(group.inputs, inputs))
            for node_id in group.nodes:
                node = graph.node(node_id)
                outs = self.stages[node_id](*[env[v] for v in node.inputs])
                env.update(zip(node.outputs, outs if isinstance(outs, tuple) else (outs,)))
            return tuple(env[v] for v in group.outputs)

    return GroupModule().eval()
