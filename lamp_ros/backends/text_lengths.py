"""A model group run at several prompt lengths, so that an inference skips the padding.

Why: the tokenizer pads every prompt to the spec's max length (200 tokens for pi05_full), and a
short task leaves most of that padding. The bench's observation has 52 valid tokens of 200, so
148 of the prefix's 968 rows are computed for nobody: a padding token is a masked key for every
query, and its own hidden state feeds only its own K/V. Each inference runs the group at the
shortest length of the spec's `fusion.text_lengths` (or the full one) that holds every valid
token (`TextAxis.length_for`). The cuda backend exports the group once with the text length as
a dynamic dimension (`dynamic_shapes`) and captures a CUDA graph for each length (a graph has
one static shape); ONNX Runtime gets one static export per length (a dynamic ONNX axis costs
shape arithmetic ORT cannot fold), each checked against the full one at build
(`check_lengths`). A few fixed lengths rather than each prompt's own: the shapes the build
checked, a handful of graphs or sessions.

Padding sits at the end of the text, so the last valid token sets the length; a mask with a valid
token past every shorter length takes the full one, so no input is ever cut. The valid tokens
see the same keys at the same positions (a masked key adds exactly nothing to a softmax), so
the actions differ from the full length's only by the GEMMs' summation order.
"""

from dataclasses import dataclass

import numpy as np

from lamp_ros.spec import MIN_LENGTH

TOKENIZE_OP = 'tokenize'  # the host op whose outputs carry the text axis (axis 1)


@dataclass(frozen=True)
class TextAxis:
    """The group's inputs with the prompt's tokens on axis 1, which of them is the valid-token
    mask, and the lengths captured (ascending; the last is the full length)."""

    inputs: tuple
    mask: str
    lengths: tuple

    def __post_init__(self):
        if self.mask not in self.inputs:
            raise ValueError(f'text axis: the mask {self.mask!r} is not one of {self.inputs}')
        lengths = tuple(self.lengths)
        if (not lengths or lengths[0] < MIN_LENGTH
                or any(a >= b for a, b in zip(lengths, lengths[1:]))):
            raise ValueError(f'text axis: lengths must be increasing and >= {MIN_LENGTH}, '
                             f'got {lengths}')

    @property
    def full(self) -> int:
        return self.lengths[-1]

    def to_dict(self) -> dict:
        return {'inputs': list(self.inputs), 'mask': self.mask, 'lengths': list(self.lengths)}

    @classmethod
    def from_dict(cls, d: dict) -> 'TextAxis':
        return cls(inputs=tuple(d['inputs']), mask=d['mask'], lengths=tuple(d['lengths']))

    def length_for(self, mask) -> int:
        """The shortest captured length that holds every valid token of `mask` ((1, full))."""
        mask = np.asarray(mask)
        if mask.shape != (1, self.full):
            raise ValueError(f'{self.mask}: shape {mask.shape}, the captured graphs need '
                             f'(1, {self.full})')
        valid = np.flatnonzero(mask[0])
        needed = int(valid[-1]) + 1 if valid.size else 0
        return next(n for n in self.lengths if n >= needed)

    def cut(self, names, values, length: int) -> list:
        """`values` (one per input name) with the text inputs cut to their first `length`
        tokens (views: the graph reads the full buffers' first columns)."""
        return [v[:, :length] if name in self.inputs else v for name, v in zip(names, values)]


def captured_lengths(build: dict) -> list:
    """The prompt lengths a group's build metadata (plan.json `build`) was captured for: [] for
    one length (what `lamp inspect` and `lamp diff` show)."""
    return list(((build or {}).get('text') or {}).get('lengths', ()))


def text_axis(graph, group, example: dict, asked) -> TextAxis | None:
    """The text axis of a group for the lengths `asked` (spec fusion.text_lengths), or None:
    when the group reads no tokenizer output, or no asked length is below the full one."""
    producers = graph.producers()
    tokenizers = {n.id for n in graph.nodes if n.op == TOKENIZE_OP}
    tokens = [v for v in group.inputs if producers.get(v) in tokenizers]
    if not tokens or not asked:
        return None
    shapes = {v: np.shape(example[v]) for v in tokens}
    full = {s[1] for s in shapes.values() if len(s) >= 2}
    if len(full) != 1 or any(len(s) != 2 or s[0] != 1 for s in shapes.values()):
        raise ValueError(f'{group.name}: the tokenizer outputs {shapes} are not all (1, length)')
    (full,) = full
    masks = [v for v in tokens if np.asarray(example[v]).dtype == np.bool_]
    if len(masks) != 1:
        raise ValueError(f'{group.name}: expected one bool token mask among {tokens}, '
                         f'got {masks}')
    lengths = tuple(n for n in asked if n < full)
    if not lengths:
        return None
    return TextAxis(inputs=tuple(tokens), mask=masks[0], lengths=lengths + (full,))


def refuse_length_dependent_outputs(group: str, shapes: dict) -> None:
    """A group run at several prompt lengths must hand on the same shapes at every length: its
    outputs go to buffers the memory plan sized once, and to groups built for one shape.
    `shapes`: output name -> dims; a dim that is not an int (a torch SymInt, or a text naming
    the sizes seen at two lengths) changes with the length. Refused naming the outputs (e.g. a
    prefix group split from the denoiser hands on a KV cache as long as the prompt)."""
    varying = {v: [d if isinstance(d, int) else str(d) for d in s] for v, s in shapes.items()
               if not all(isinstance(d, int) for d in s)}
    if varying:
        raise ValueError(f'{group}: fusion.text_lengths: the outputs {varying} change shape '
                         f'with the prompt length; a group runs at several lengths only when '
                         f'what it hands on does not (keep the prefix with the stages that '
                         f'read its KV cache, or leave text_lengths out)')


def program_output_shapes(program) -> list:
    """The output shapes of a torch.export program, in order (a dynamic dim is a SymInt)."""
    (out,) = [n for n in program.graph.nodes if n.op == 'output']
    return [list(a.meta['val'].shape) for a in out.args[0]]


CHECK_TOLERANCE = 1e-5  # of the outputs' scale: the padding adds nothing, rounding may differ


def check_lengths(group, axis: TextAxis, example: dict, run) -> dict:
    """Prove an export's text axis at every length: for each shorter length n, the example's
    prompt with its tokens from n on masked out, run at n and at the full length, must give
    outputs of the same shapes (refused as `refuse_length_dependent_outputs` does) and values
    (to CHECK_TOLERANCE of their scale). An export that baked a length into a shape, or reads
    the padding, fails here instead of on the robot. `group`: its GroupSpec; `run(values) ->
    list of arrays`, one value per group input and one array per group output. Returns
    {length: max relative difference}."""
    names = list(group.inputs)
    values = [np.asarray(example[v]) for v in names]
    at = names.index(axis.mask)
    errors = {}
    for n in axis.lengths[:-1]:
        masked = list(values)
        masked[at] = values[at].copy()
        masked[at][:, n:] = False
        full = [np.asarray(a) for a in run(masked)]
        short = [np.asarray(a) for a in run(axis.cut(names, masked, n))]
        refuse_length_dependent_outputs(group.name, {
            v: [a if a == b else f'{a} at {n} tokens, {b} at {axis.full}'
                for a, b in zip(s.shape, f.shape)]
            for v, s, f in zip(group.outputs, short, full) if s.shape != f.shape})
        scale = max(float(np.abs(f).max()) for f in full) or 1.0
        error = max(float(np.abs(np.asarray(a, np.float64) - b).max())
                    for a, b in zip(short, full)) / scale
        if not error <= CHECK_TOLERANCE:
            raise ValueError(f'{group.name}: text length {n}: the exported group\'s outputs '
                             f'differ from the full length\'s by {error:.3g} of their scale '
                             f'(allowed {CHECK_TOLERANCE:g}); the export at this length does '
                             f'not compute what the full one does')
        errors[n] = error
    return errors


def dynamic_shapes(axis: TextAxis, names) -> tuple:
    """torch.export's `dynamic_shapes` for a module called as forward(*inputs): axis 1 of the
    text inputs between the shortest and the full length."""
    import torch
    text = torch.export.Dim('text', min=axis.lengths[0], max=axis.full)
    return (tuple({1: text} if name in axis.inputs else None for name in names),)
