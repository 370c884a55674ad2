"""The precision plan of groups whose backend lowers stage modules (cuda: linears to FP8),
made before they are built.

compiler/precision_plan.py plans groups it can rebuild in seconds (ONNX Runtime to int8) on
the built artifact, one variant per layer. A cuda group's build takes minutes at full size, so
its plan is made on the stage modules instead, and the group is built once, with the chosen
linears in FP8:
1. **A provisional artifact**: every other group built, this one run by its backend's eager
   variants (backends/cuda/fp8_variants.py) through the same Runtime, so that the actions come
   out in the robot's units, after the host stages, exactly as the artifact's will.
2. **The reference**: the calibration observations through the variants with nothing lowered;
   every candidate linear's calls and rows are recorded on the way.
3. **Time first**: each candidate's GEMM, in the group precision and in FP8, timed on the build
   GPU at its rows, times its calls per inference. A linear that saves too little (the
   variants' `min_saving` of its time: a GEMM timed alone overstates small gains) is kept
   without measuring its error (lowering it could only cost accuracy), as are those the policy's
   lowering refuses (`Rewrites.low_precision_refusals`: pi0.5's expert layers, whose fused
   kernels read their weights in bf16) and those of the denoise loop's state.
4. **Sensitivity and the plan**: each remaining linear lowered alone, its action error measured
   against the reference; then `choose` (precision_plan.py) ranks them by time saved per unit
   of error, verifies the whole set and backs off the last-ranked while it exceeds the budget.
The ranking uses the build GPU's timings, as the cuda lowering's other choices do (its tiles,
its GEMM algorithms): the plan is for that GPU, and plan.json records it.
"""

from contextlib import ExitStack

from lamp_ros.compiler.precision_plan import (action_error, calibration_observations, choose,
                                              layer_decision, VariantRuns)


def _timed(variants, name: str, rows: int) -> tuple:
    return variants.time_ms(name, rows)


def plan_modules(artifact, variants: dict, spec, pipeline, refusals: dict, say,
                 device: str, timer=_timed) -> tuple:
    """Plan the groups of `variants` ({group name: eager variants}) of the provisional
    `artifact` -> ({group: chosen linears}, {group: plan.json's `precision_plan`},
    {group: evidence/precision.json's entry}). `refusals`: {linear name prefix: why the
    policy's lowering cannot run it in low precision}. `timer(variants, name, rows)`: (ms in
    the group precision, ms in low precision) of one call (default: timed on the GPU)."""
    settings, budget = spec.precision, spec.precision.budget
    observations = calibration_observations(spec, pipeline)
    say(f'precision plan: {len(observations)} calibration observations '
        f'({settings.calibration.source}), budget cosine >= {budget.cosine}, max rel <= '
        f'{budget.max_rel}')
    runs = VariantRuns(artifact, observations, device)
    runners = dict(variants)
    for v in variants.values():
        v.lower(())
    with ExitStack() as stack:
        seen = {g: stack.enter_context(v.observing()) for g, v in variants.items()}
        reference, _ = runs.run(runners=runners)
    fixed = tuple(getattr(pipeline.policy, 'loop_state_layers', ()))
    chosen_by, records, evidence = {}, {}, {}
    for group_name, v in variants.items():
        precision, kept = v.precision, v.group.precision

        def error_of(layers, v=v):
            v.lower(layers)
            try:
                return action_error(runs.run(runners=runners)[0], reference)
            finally:
                v.lower(())
        table = _table(v, seen[group_name], len(observations), refusals, fixed,
                       settings.lower_loop_state, timer)
        measured = [n for n, row in table.items() if row['eligible']]
        say(f'precision plan: {group_name}: {len(table)} linears, {len(measured)} save time '
            f'in {precision}; measuring each alone')
        for i, name in enumerate(measured):
            table[name].update(error_of([name]))
            say(f'precision plan: {group_name} {i + 1}/{len(measured)} {name}: saves '
                f'{table[name]["saved_ms"]:.3f} ms, cosine {table[name]["cosine"]:.6f}, '
                f'max rel {table[name]["max_rel"]:.2e}')

        def verify(layers, group_name=group_name, error_of=error_of):
            error = error_of(layers)
            say(f'precision plan: {group_name}: {len(layers)} linears together: cosine '
                f'{error["cosine"]:.6f}, max rel {error["max_rel"]:.2e}')
            return error
        chosen, steps = choose(table, budget, verify, gain='saved_ms')
        backed_off = {s['backed_off'] for s in steps if 'backed_off' in s}
        saved = sum(table[n]['saved_ms'] for n in chosen)
        timed = sum(row.get('high_ms', 0.0) for row in table.values())
        chosen_by[group_name] = chosen
        records[group_name] = {'lowered_to': precision, 'timed_on': v.timed_on(), 'layers': {
            name: layer_decision(name, row, chosen, backed_off, budget, precision, kept)
            for name, row in table.items()}}
        evidence[group_name] = {
            'precision': precision, 'gain': 'saved_ms', 'layers': table, 'steps': steps,
            'chosen': chosen, 'saved_ms': saved, 'candidates_ms': timed,
            'observations': len(observations),
            'combined': steps[-1] if steps and steps[-1]['within_budget'] else None}
        say(f'precision plan: {group_name}: {len(chosen)} of {len(table)} linears in '
            f'{precision}, saving {saved:.3f} ms of the {timed:.3f} ms they take in {kept}')
    return chosen_by, records, evidence


def _table(v, seen: dict, observations: int, refusals: dict, fixed: tuple,
           lower_loop_state: bool, timer) -> dict:
    """{linear: its row} for every candidate linear an inference called: its rows and calls per
    inference, its multiply-adds, and, where it may be lowered, its timings; `kept` says why
    one is not measured, `eligible` marks those that are."""
    table = {}
    for name in sorted(seen):
        calls = seen[name]
        rows, per_inference = max(calls), len(calls) / max(observations, 1)
        node, path = v.linears[name]
        linear = v.lowered[name] if name in v.lowered else v.stages[node].get_submodule(path)
        row = {'rows': rows, 'calls': per_inference,
               'macs': int(rows * linear.in_features * linear.out_features * per_inference)}
        refusal = next((why for prefix, why in refusals.items()
                        if name == prefix or name.startswith(prefix + '.')), None)
        state = next((p for p in fixed if name == p or name.startswith(p + '.')), None)
        if refusal:
            row['kept'] = f'the policy\'s cuda lowering cannot run it in {v.precision}: {refusal}'
        elif state and not lower_loop_state:
            row.update(loop_state=True, kept='reads or writes the denoise loop state '
                                             '(precision.lower_loop_state is off)')
        else:
            high, low = timer(v, name, rows)
            row.update(high_ms=high * per_inference, low_ms=low * per_inference,
                       saved_ms=(high - low) * per_inference)
            least = getattr(v, 'min_saving', 0.0)
            if high - low <= least * high:  # no timings in the words: plan.json is in the id
                row['kept'] = (f'saves too little on the build GPU: {least:.0%} of its '
                               f'{v.group.precision} time or less (its timings: '
                               'evidence/precision.json)')
        row['eligible'] = 'kept' not in row
        table[name] = row
    return table
