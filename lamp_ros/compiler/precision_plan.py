"""The precision plan (`precision: {plan: auto}`, spec/precision.py): which layers run in low
precision, chosen by measurement against a budget on the actions.

The build has written the artifact at the stages' own precisions; this is the reference. Then:
1. **Calibration.** The calibration observations (the parity samples', or a folder of `.npz`
   observations) run through the reference Runtime, which hands over every group's inputs and
   the action chunk in robot units (after unnormalisation). Each group whose backend can lower
   its layers (a backend's `precision_lowering`: ONNX Runtime to int8, backends/onnx_int8.py)
   calibrates its activation ranges on those inputs.
2. **Sensitivity.** Every candidate layer is lowered alone and the artifact variant runs the
   same observations: the action error it causes (the lowest cosine of any observation's chunk
   against the reference, and max |error| / max |reference| over all of them).
3. **The plan.** The layers that fit the budget alone are ranked by the work they move to low
   precision (multiply-adds per call) per unit of error, the error being the larger of the two
   measures as a fraction of its budget, and all of them are lowered together and verified;
   while the set exceeds the budget, the last-ranked layer is backed off and the rest verified
   again. The ranking counts work, not time: per-layer timings on a CPU are within its noise and
   would make the artifact depend on the machine's load; the whole plan's speed is measured
   by its benchmark (bench/precision_cpu.py).
The layers the policy names as its denoise loop's state (`loop_state_layers`: they read x_t or
write the velocity) stay at full precision unless `precision.lower_loop_state` is set: an FP16
TensorRT pi0.5 lost its actions (cosine -0.55) until its loop ran in FP32.

plan.json records every candidate layer's precision and why (the group's `precision_plan`);
evidence/precision.json the measurements (calibration ranges, the sensitivity table, every
verification step), evidence/precision.png the table as a picture. The models of the trials
(each layer alone, each verified set: dozens of copies of the group) are written to a scratch
folder of the build (WORKDIR) and removed with it before the manifest is written: the
artifact ships the chosen model only, and the measurements stay in the evidence.
"""

import dataclasses
import os
import shutil
import tempfile

import numpy as np

from lamp_ros.backends import get_backend
from lamp_ros.runtime import Runtime
from lamp_ros.runtime.runtime import default_device

WORKDIR = '.precision'  # candidates and scratch live here inside the artifact being built,
#                         removed before its manifest is written: evidence keeps their
#                         measurements, the artifact ships only the chosen model
NON_FINITE = 1e9        # max_rel of actions that hold a NaN or an infinity


class PrecisionPlanError(ValueError):
    """The spec's precision plan cannot be made for this artifact; says why."""


def calibration_observations(spec, pipeline) -> list:
    """The observations the plan calibrates and measures on (spec.precision.calibration)."""
    from lamp_ros.compiler.parity import parity_observations
    cal = spec.precision.calibration
    if cal.source == 'parity':
        return parity_observations(pipeline, cal.samples, spec.parity_missing_camera)
    folder = spec.resolve(cal.path)
    if not os.path.isdir(folder):
        raise PrecisionPlanError(f'precision.calibration.path: no folder {folder}')
    files = sorted(f for f in os.listdir(folder) if f.endswith('.npz'))[:cal.samples]
    if not files:
        raise PrecisionPlanError(f'precision.calibration.path: no .npz observation in {folder}')
    return [read_npz_observation(os.path.join(folder, f)) for f in files]


def read_npz_observation(path: str) -> dict:
    """One observation from an .npz file: `state`, `images.<slot>` and, optionally, `prompt`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise PrecisionPlanError(f'{path}: not a readable .npz file ({exc})') from exc
    if 'state' not in arrays:
        raise PrecisionPlanError(f'{path}: no array `state`')
    images = {k[len('images.'):]: v for k, v in arrays.items() if k.startswith('images.')}
    if not images:
        raise PrecisionPlanError(f'{path}: no camera image (arrays named images.<slot>)')
    obs = {'images': images, 'state': arrays['state']}
    if 'prompt' in arrays:
        obs['prompt'] = str(arrays['prompt'])
    return obs


def action_error(got: list, reference: list) -> dict:
    """{'cosine': the lowest over the chunks, 'max_rel': max |error| / max |reference|};
    non-finite actions are the worst error (cosine -1, max_rel NON_FINITE) and say so."""
    worst_cos, max_abs, scale = 1.0, 0.0, 0.0
    for a, b in zip(got, reference):
        a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
        if not np.all(np.isfinite(a)):  # the worst error there is, in numbers JSON holds
            return {'cosine': -1.0, 'max_rel': NON_FINITE, 'non_finite': True}
        norm = np.linalg.norm(a) * np.linalg.norm(b)
        cos = float(a @ b / norm) if norm > 0 else float(np.array_equal(a, b))
        worst_cos = min(worst_cos, cos)
        max_abs = max(max_abs, float(np.abs(a - b).max()))
        scale = max(scale, float(np.abs(b).max()))
    return {'cosine': worst_cos, 'max_rel': max_abs / scale if scale > 0 else max_abs}


def error_units(error: dict, budget) -> float:
    """The error as a fraction of the budget, the larger of its two measures."""
    return max((1.0 - error['cosine']) / max(1.0 - budget.cosine, 1e-12),
               error['max_rel'] / max(budget.max_rel, 1e-12))


def choose(table: dict, budget, verify, gain: str = 'macs') -> tuple:
    """Greedy plan: `table` {layer: {gain, 'cosine', 'max_rel', 'eligible'}} (each layer
    lowered alone; a row without an error was not measured), `verify(layers) -> error` of a
    set -> (chosen layers in rank order, the verification steps). Ranked by gain (work moved,
    or time saved) per unit of error; the whole set is verified, and the last-ranked layer
    backed off while the set exceeds the budget."""
    ranked = sorted((name for name, row in table.items()
                     if row['eligible'] and 'cosine' in row
                     and budget.allows(row['cosine'], row['max_rel'])),
                    key=lambda name: (-table[name][gain]
                                      / max(error_units(table[name], budget), 1e-9), name))
    chosen, steps = list(ranked), []
    while chosen:
        error = verify(chosen)
        within = budget.allows(error['cosine'], error['max_rel'])
        steps.append({'layers': len(chosen), **error, 'within_budget': within})
        if within:
            break
        steps[-1]['backed_off'] = chosen.pop()
    return chosen, steps


class VariantRuns:
    """Artifact variants with some groups' builds replaced, run on the calibration set."""

    def __init__(self, artifact, observations: list, device: str | None = None):
        self.artifact, self.observations, self.device = artifact, observations, device

    def run(self, builds: dict | None = None, groups=(), runners: dict | None = None) -> tuple:
        """-> (the chunks, {group name: [its inputs per observation]} for `groups`);
        `runners`: groups run by these instead of their builds (Runtime.from_artifact)."""
        artifact = self.artifact
        if builds:
            plan = artifact.plan
            changed = tuple(dataclasses.replace(g, build=builds[g.name]) if g.name in builds
                            else g for g in plan.groups)
            artifact = dataclasses.replace(artifact,
                                           plan=dataclasses.replace(plan, groups=changed))
        runtime = Runtime.from_artifact(artifact, device=self.device, runners=runners)
        chunks, inputs = [], {g.name: [] for g in groups}
        try:
            for obs in self.observations:
                runtime.reset()
                values = {}
                out = runtime.run(runtime.feeds(obs, 0.0), capture=values)
                chunk = values.get(runtime.chunk_value) if runtime.chunk_value else None
                chunks.append(np.concatenate([np.ravel(v) for v in out.values()])
                              if chunk is None else chunk)
                for g in groups:
                    inputs[g.name].append({v: values[v] for v in g.inputs})
        finally:
            runtime.close()
        return chunks, inputs


def plan_precision(root: str, spec, pipeline, say, planned: dict | None = None) -> tuple:
    """Make the spec's precision plan for the artifact being built at `root` (plan.json and
    the manifest written) -> (the plan with the lowered groups' entries, whose files are
    written and the reference's ONNX files removed; the evidence, evidence/precision.json's
    content). `planned`: the evidence of the groups planned on their modules before they were
    built (compiler/precision_modules.py), which the evidence includes."""
    from lamp_ros.artifact.load import open_artifact
    artifact = open_artifact(root, verify=False)
    lowerings = {}
    for group in artifact.plan.groups:
        make = getattr(get_backend(group.backend), 'precision_lowering', None)
        if make is not None:
            lowerings[group.name] = make(group, root)
    budget, settings = spec.precision.budget, spec.precision
    evidence = {'budget': budget.to_dict(), 'calibration': settings.calibration.to_dict(),
                'groups': dict(planned or {})}
    if not lowerings:
        if planned:
            evidence['calibration']['observations'] = next(
                iter(planned.values()))['observations']
            return artifact.plan, evidence
        raise PrecisionPlanError(
            'precision.plan auto: no group of this plan has a backend that lowers layers '
            '(onnxruntime: int8, cuda: fp8); groups: ' +
            ', '.join(f'{g.name} ({g.backend})' for g in artifact.plan.groups))
    observations = calibration_observations(spec, pipeline)
    say(f'precision plan: {len(observations)} calibration observations '
        f'({settings.calibration.source}), budget cosine >= {budget.cosine}, max rel <= '
        f'{budget.max_rel}')
    variants = VariantRuns(artifact, observations,
                           default_device(artifact.manifest['target']))
    groups = [g for g in artifact.plan.groups if g.name in lowerings]
    reference, inputs = variants.run(groups=groups)
    fixed = tuple(getattr(pipeline.policy, 'loop_state_layers', ()))
    work = os.path.join(root, WORKDIR)
    os.makedirs(work, exist_ok=True)
    evidence['calibration']['observations'] = len(observations)
    builds = {}
    try:
        for group in groups:
            lowering = lowerings[group.name]
            scratch = tempfile.mkdtemp(prefix='calibrate-', dir=work)
            trials = f'{WORKDIR}/{group.name}'  # the models of each layer alone, each set
            say(f'precision plan: {group.name}: calibrating {len(lowering.candidates)} '
                f'candidate layers ({lowering.precision})')
            ranges = lowering.calibrate(inputs[group.name], scratch)

            def measure(layers, tag, group=group, lowering=lowering, trials=trials):
                """The action error of the group with `layers` lowered, run on the session
                that checked the lowered model's kernels (the CPU's: reused where the
                variants run on the CPU)."""
                build, runner = lowering.lower_and_load(layers, tag, folder=trials)
                reuse = {group.name: runner} if variants.device == 'cpu' else None
                return action_error(variants.run({group.name: build}, runners=reuse)[0],
                                    reference)

            table = {}
            for i, (name, layer) in enumerate(lowering.candidates.items()):
                state = next((p for p in fixed if name.startswith(p)), None)
                eligible = settings.lower_loop_state or state is None
                error = measure([name], name)
                table[name] = {'macs': layer.macs, **error, 'eligible': eligible,
                               **({'loop_state': True} if state else {})}
                say(f'precision plan: {group.name} {i + 1}/{len(lowering.candidates)} '
                    f'{name}: cosine {error["cosine"]:.6f}, max rel {error["max_rel"]:.2e}')

            def verify(layers, group=group, measure=measure):
                error = measure(layers, f'set{len(layers)}')
                say(f'precision plan: {group.name}: {len(layers)} layers together: cosine '
                    f'{error["cosine"]:.6f}, max rel {error["max_rel"]:.2e}')
                return error
            chosen, steps = choose(table, budget, verify)
            backed_off = {s['backed_off'] for s in steps if 'backed_off' in s}
            layers = {name: layer_decision(name, row, chosen, backed_off, budget,
                                           lowering.precision) for name, row in table.items()}
            total = sum(row['macs'] for row in table.values())
            moved = sum(table[name]['macs'] for name in chosen)
            builds[group.name] = lowering.lower(chosen, f'model.{lowering.precision}') \
                if chosen else group.build
            builds[group.name] = {**builds[group.name], 'precision_plan': {
                'lowered_to': lowering.precision, 'layers': layers}}
            evidence['groups'][group.name] = {
                'precision': lowering.precision, 'activation_ranges': ranges,
                'weights': getattr(lowering, 'weights', ''), 'layers': table, 'steps': steps,
                'chosen': chosen, 'macs_lowered': moved, 'macs_candidates': total,
                'combined': steps[-1] if steps and steps[-1]['within_budget'] else None}
            say(f'precision plan: {group.name}: {len(chosen)} of {len(table)} layers in '
                f'{lowering.precision} ({moved / max(total, 1):.0%} of the candidates\' work)')
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _replace_builds(root, artifact, builds), evidence


def layer_decision(name, row, chosen, backed_off, budget, precision, kept='fp32') -> dict:
    """plan.json's entry for one candidate layer: its precision and why, in words (`kept`:
    the precision of a layer not lowered)."""
    if name in chosen:
        return {'precision': precision, 'why': 'within the budget alone and in the set'}
    if 'kept' in row:  # not measured: the row says why
        return {'precision': kept, 'why': row['kept']}
    if not row['eligible']:
        return {'precision': kept, 'why': 'reads or writes the denoise loop state '
                                          '(precision.lower_loop_state is off)'}
    if name in backed_off:
        return {'precision': kept, 'why': 'backed off: the set exceeded the budget with it'}
    if not budget.allows(row['cosine'], row['max_rel']):
        return {'precision': kept, 'why': 'alone it exceeds the budget'}
    return {'precision': kept, 'why': 'not needed: the set was within the budget without it'}


def _replace_builds(root: str, artifact, builds: dict):
    """The plan with the planned groups' entries; the files only the reference's entries
    named (their ONNX files) are removed."""
    before = {g.name: g.build for g in artifact.plan.groups}
    for name, build in builds.items():
        old = before[name].get('onnx')
        if old and old != build.get('onnx'):
            os.remove(os.path.join(root, old))
    return dataclasses.replace(artifact.plan, groups=tuple(
        dataclasses.replace(g, build=builds.get(g.name, g.build))
        for g in artifact.plan.groups))


GAIN_LABELS = {'macs': ('multiply-adds moved per call (millions)', 1e-6),
               'saved_ms': ('GPU time saved per inference (ms)', 1.0)}


def render_precision(evidence: dict, path: str) -> None:
    """Each measured candidate layer as a point: what it gains in low precision (work moved,
    or time saved) against the action error it causes alone (as a fraction of the budget),
    chosen ones filled, the budget line."""
    from matplotlib.figure import Figure  # imported here: only pictures need matplotlib
    from lamp_ros.spec.precision import Budget
    budget = Budget(**evidence['budget'])
    groups = evidence['groups']
    fig = Figure(figsize=(9, 4.5 * max(len(groups), 1)))
    for ax, (name, group) in zip(fig.subplots(max(len(groups), 1), 1, squeeze=False)[:, 0],
                                 groups.items()):
        gain = group.get('gain', 'macs')
        label, unit = GAIN_LABELS[gain]
        for layer, row in group['layers'].items():
            if 'cosine' not in row:  # not measured (plan.json says why)
                continue
            chosen = layer in group['chosen']
            units = max(error_units(row, budget), 1e-6)
            ax.scatter(row[gain] * unit, units, s=36,
                       color='C2' if chosen else ('C7' if not row['eligible'] else 'C3'),
                       marker='o' if chosen else 'x')
            ax.annotate(layer, (row[gain] * unit, units), fontsize=6, alpha=0.7,
                        xytext=(3, 2), textcoords='offset points')
        ax.axhline(1.0, color='gray', linestyle='--', label='budget')
        ax.set_yscale('log')
        ax.set_xlabel(label)
        ax.set_ylabel('action error alone / budget')
        combined = group.get('combined') or {'cosine': float('nan'), 'max_rel': float('nan')}
        ax.set_title(f'{name}: {len(group["chosen"])} of {len(group["layers"])} layers in '
                     f'{group["precision"]} (set: cosine {combined["cosine"]:.5f}, max rel '
                     f'{combined["max_rel"]:.2e}); o chosen, x kept')
        ax.legend(loc='lower right')
    fig.tight_layout()
    fig.savefig(path)
