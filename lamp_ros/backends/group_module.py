"""Compile side, shared by the ONNX, TensorRT and CUDA backends: a group of model stages as one
nn.Module that runs the stages in graph order over named values, so that one export captures
the whole group and its internal values (e.g. the KV cache) never leave the device."""


def group_module(graph, group, modules, compute_dtype=None):
    """One nn.Module running the group's model stages in order over named values.

    With `compute_dtype` (modules already cast to it), floating inputs are cast to it on entry
    and floating outputs back to float32 on exit: the group's boundary types stay those of the
    traced graph, so a precision choice never leaks into other groups.
    """
    import torch
    from torch import nn

    def cast(x, dtype):
        return x.to(dtype) if dtype is not None and x.is_floating_point() else x

    class GroupModule(nn.Module):
        def __init__(self):
            super().__init__()
            # Stages under their node ids (weights named `stages.<node>.<param>`). A node id
            # may be any name a policy chose, `double` or `to` included, which nn.ModuleDict
            # refuses as clashing with nn.Module's own attributes: the container registers
            # them directly and forward looks them up by key, never as attributes.
            self.stages = nn.Module()
            for node_id in group.nodes:
                self.stages._modules[node_id] = modules[node_id]

        def forward(self, *inputs):
            env = dict(zip(group.inputs, (cast(x, compute_dtype) for x in inputs)))
            for node_id in group.nodes:
                node = graph.node(node_id)
                outs = self.stages._modules[node_id](*[env[v] for v in node.inputs])
                env.update(zip(node.outputs, outs if isinstance(outs, tuple) else (outs,)))
            out_dtype = torch.float32 if compute_dtype is not None else None
            return tuple(cast(env[v], out_dtype) for v in group.outputs)

    return GroupModule().eval()
