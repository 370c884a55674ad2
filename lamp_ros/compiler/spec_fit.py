"""What a spec asks of the traced pipeline, checked: a spec option that names a stage the
pipeline does not have, or needs a stage it lacks, is an error naming the option, never a
setting silently ignored (a spec copied from another policy would otherwise build something
else than it says)."""

from lamp_ros.backends.text_lengths import TOKENIZE_OP


def check_spec_fits(spec, graph) -> None:
    ops = {n.op for n in graph.nodes}
    ids = {n.id for n in graph.nodes}
    listed = ', '.join(sorted(ops))
    unknown = sorted(set(spec.stages) - {'default'} - ops)
    if unknown:
        raise ValueError(f'stages.{unknown[0]}: the traced pipeline has no stage {unknown[0]!r} '
                         f'(its stages: {listed})')
    for key in ('split_after', 'side_stream'):
        missing = sorted(set(spec.fusion.get(key, [])) - ids)
        if missing:
            raise ValueError(f'fusion.{key}: {missing} are not stages of the traced pipeline '
                             f'({", ".join(sorted(ids))})')
    if spec.fusion.get('text_lengths') and TOKENIZE_OP not in ops:
        raise ValueError(f'fusion.text_lengths: the traced pipeline has no {TOKENIZE_OP!r} '
                         'stage whose prompt length they could cut; remove the option')
