"""FanOut: the linears that read one input, whatever a pass made of them.

The eager layers call q_proj, k_proj, v_proj (gate_proj, up_proj) by name; merge_projections
makes them one GEMM, remove_unread_work keeps only K/V, the cuda lowering swaps in other linear
kinds. So the layers of the passes' form read a FanOut's outputs by name, and which linear makes
which output is the FanOut's business alone.
"""

import torch
from torch import nn


def proj_name(names) -> str:
    """Attribute name of a linear making `names`: q_proj, qkv_proj, gate_up_proj."""
    short = all(len(n) == 1 for n in names)
    return ('' if short else '_').join(names) + '_proj'


class FanOut(nn.Module):
    """Linears reading one input -> {output name: tensor}; a linear may make several outputs."""

    def __init__(self, parts):
        """parts: [(names, sizes, nn.Linear)], the linear's rows being those outputs in order."""
        super().__init__()
        self.parts = []
        for names, sizes, linear in parts:
            if sum(sizes) != linear.out_features or len(names) != len(sizes):
                raise ValueError(f'FanOut: {names} of sizes {sizes} from {linear}')
            self.add_module(proj_name(names), linear)
            self.parts.append((proj_name(names), tuple(names), tuple(sizes)))

    def forward(self, x: torch.Tensor) -> dict:
        return self._named(lambda linear: linear(x))

    def from_rows(self, codes: torch.Tensor, row_scale: torch.Tensor, dtype) -> dict:
        """forward of input rows already quantised for Fp8Linears (every linear is one)."""
        return self._named(lambda linear: linear.from_rows(codes, row_scale, dtype))

    def _named(self, run) -> dict:
        out = {}
        for attr, names, sizes in self.parts:
            y = run(getattr(self, attr))
            out.update(zip(names, y.split(sizes, dim=-1)) if len(names) > 1 else {names[0]: y})
        return out

    def linears(self) -> list:
        return [getattr(self, attr) for attr, _, _ in self.parts]

    def rows(self) -> list:
        """[(name, size, linear, first row)] for every output."""
        out = []
        for attr, names, sizes in self.parts:
            start = 0
            for name, size in zip(names, sizes):
                out.append((name, size, getattr(self, attr), start))
                start += size
        return out

    @torch.no_grad()
    def select(self, names, merge: bool) -> 'FanOut':
        """A FanOut making only `names` (in this order): one linear if `merge`, else one each."""
        rows = {name: (size, lin, start) for name, size, lin, start in self.rows()}
        groups = [list(names)] if merge else [[n] for n in names]
        parts = []
        for group in groups:
            weight = torch.cat([rows[n][1].weight[rows[n][2]:rows[n][2] + rows[n][0]]
                                for n in group])
            biases = [rows[n][1].bias for n in group]
            linear = nn.Linear(weight.shape[1], weight.shape[0], bias=biases[0] is not None,
                               device=weight.device, dtype=weight.dtype)
            linear.weight.copy_(weight)
            if linear.bias is not None:
                linear.bias.copy_(torch.cat([b[rows[n][2]:rows[n][2] + rows[n][0]]
                                             for n, b in zip(group, biases)]))
            parts.append((tuple(group), tuple(rows[n][0] for n in group), linear))
        return FanOut(parts)

    @property
    def names(self) -> tuple:
        return tuple(n for _, names, _ in self.parts for n in names)
