"""`compile_spec`: spec -> artifact directory, one stage after another.

The stages, in order: load the spec, build the eager pipeline, trace it (with op-level
subgraphs), apply graph passes, plan the precision of the groups planned on their modules
where the spec asks for a plan (compiler/precision_modules.py: a cuda group's linears in FP8,
before it is built), assign backends and partition, write weights and resources, compile each
group with its backend, plan memory, write graph/plan/memory, make the precision plan of the
groups planned on the built artifact (compiler/precision_plan.py: ONNX Runtime's layers in
int8 where the measured action error allows), check parity of the loaded artifact against
the eager reference, write the evidence and the manifest. The artifact is built in a
temporary directory and moved into place at the end.

What decides behaviour (graph, plan, memory plan, weights, compiled groups, resources, spec)
makes the artifact id; what the build measured (stage timings, how each tuned choice was made,
the parity run) goes under evidence/, checksummed but not hashed
into the id: one spec built twice is one artifact (artifact/manifest.py).
"""

from dataclasses import dataclass
import json
import os
import platform
import shutil
import tempfile
import time

from lamp_ros.artifact.abi import abi_from_graph
from lamp_ros.artifact.manifest import PROVENANCE, write_manifest
from lamp_ros.artifact.plan import BuildPlan
from lamp_ros.backends import get_backend
from lamp_ros.backends.base import CompileContext
from lamp_ros.compiler.device_letterbox import letterbox_on_device
from lamp_ros.compiler.memory import memory_plan
from lamp_ros.compiler.parity import run_parity
from lamp_ros.compiler.rewrites import enabled_passes, rewrites_for, run_passes
from lamp_ros.compiler.record_passes import record_passes, stage_modules
from lamp_ros.compiler.spec_fit import check_spec_fits
from lamp_ros.compiler.partition import assign, partition, phases
from lamp_ros.compiler.coverage import coverage
from lamp_ros.spec import load_spec, Spec


@dataclass(frozen=True)
class BuildResult:
    root: str
    artifact_id: str
    parity_passed: bool
    parity: dict
    stage_seconds: dict


def tool_versions() -> dict:
    import numpy
    import onnx
    import onnxruntime
    import torch

    import lamp_ros
    try:
        import tensorrt
        trt = tensorrt.__version__
    except ImportError:
        trt = None
    return {'python': platform.python_version(), 'torch': torch.__version__,
            'onnx': onnx.__version__, 'onnxruntime': onnxruntime.__version__,
            'tensorrt': trt, 'numpy': numpy.__version__, 'lamp_ros': lamp_ros.__version__}


def _dump(root: str, rel: str, data) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(data, f, indent=1, sort_keys=True, allow_nan=False)


def _save_tensors(root: str, rel: str, tensors: dict) -> None:
    from safetensors.numpy import save_file
    import numpy as np
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file({k: np.require(v, requirements='C') for k, v in sorted(tensors.items())}, path)


def write_weights(root: str, modules: dict) -> None:
    """weights/<node>.safetensors for every model stage module (optimised, if passes ran)."""
    from safetensors.torch import save_file
    for node_id, module in modules.items():
        path = os.path.join(root, 'weights', f'{node_id}.safetensors')
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
        save_file(dict(sorted(tensors.items())), path)


def write_resources(root: str, resources: dict) -> dict:
    """Copy the files the policy's host stages read at run time (`policy.resources`: {name:
    path}, e.g. a tokenizer model or a calibration table) into resources/<name>, where the
    manifest checksums them and the runtime finds them by name -> {name: source path}."""
    for name, path in resources.items():
        if not name or os.sep in name or name.startswith('.'):
            raise ValueError(f'policy.resources: {name!r} is not a plain file name')
        if not os.path.isfile(path):
            raise FileNotFoundError(f'policy.resources[{name!r}]: no file {path}')
        os.makedirs(os.path.join(root, 'resources'), exist_ok=True)
        shutil.copyfile(path, os.path.join(root, 'resources', name))
    return dict(resources)


def compile_groups(root: str, graph, groups, modules: dict, example: dict, spec, rewrites,
                   say, measure_tiles: bool = False, planned: dict | None = None,
                   placeholders=()) -> tuple:
    """Each group compiled by its backend into `root` -> (the groups with their builds, each
    group's build evidence). `planned`: {group: its module-level precision plan}, recorded in
    its build (plan.json); `placeholders`: groups left unbuilt (an empty build: the module
    plan runs them by their eager variants)."""
    built, evidence = [], {}
    for group in groups:
        if group.name in placeholders:
            built.append(group)
            continue
        say(f'compile {group.name} ({group.backend}, {len(group.nodes)} nodes)')
        ctx = CompileContext(graph, group, root, modules, example, say,
                             text_lengths=tuple(spec.fusion['text_lengths']),
                             options=spec.build, measure_tiles=measure_tiles,
                             lowering=rewrites.cuda_lowering)
        result = get_backend(group.backend).compile(ctx)
        metadata = result.metadata
        if planned and group.name in planned:
            metadata = {**metadata, 'precision_plan': planned[group.name]}
        built.append(type(group)(**{**group.__dict__, 'build': metadata}))
        if result.evidence:
            evidence[group.name] = result.evidence
    return built, evidence


def write_plan(root: str, graph, plan: BuildPlan, spec, pipeline) -> tuple:
    """graph.json, plan.json, memory.json (planned here), spec.json and the manifest
    -> (the ABI, the tool versions)."""
    memory = memory_plan(graph, plan)
    with open(os.path.join(root, 'graph.json'), 'w', encoding='utf-8') as f:
        f.write(graph.to_json())
    _dump(root, 'plan.json', plan.to_dict())
    _dump(root, 'memory.json', memory.to_dict())
    _dump(root, 'spec.json', spec.to_dict())
    abi = abi_from_graph(graph, pipeline.interface, pipeline.rate_hz, spec.robot)
    versions = tool_versions()
    write_manifest(root, spec.target, abi, versions, spec.name)
    return abi, versions


def plan_module_precision(spec, pipeline, graph, modules: dict, results: dict, example: dict,
                          rewrites, parent: str, device: str, say, timer=None) -> tuple:
    """The precision plan of the groups whose backend plans on stage modules
    (compiler/precision_modules.py), made on a provisional artifact (in a temporary folder in
    `parent`) whose other groups are built -> (`results` with the swaps the plan made in
    `modules` as the `precision_plan` entry, {group: plan.json's record}, {group: its
    evidence}); (results, {}, {}) where no group's backend plans that way. `timer`: as
    plan_modules takes it (tests without a GPU)."""
    from lamp_ros.artifact.load import open_artifact
    from lamp_ros.compiler.precision_modules import plan_modules
    from lamp_ros.compiler.rewrites import PassResult
    # the provisional artifact reads the graph as the passes left it: no weight hashes or
    # exported subgraphs (record_passes makes them once, after the plan)
    assignments = assign(graph, spec)
    groups = partition(graph, spec, assignments)
    variants = {g.name: make(graph, g, modules, example, device) for g in groups
                if (make := getattr(get_backend(g.backend), 'precision_variants', None))}
    if not variants:
        return results, {}, {}
    root = tempfile.mkdtemp(prefix='.lamp-plan-', dir=parent)
    try:
        provisional = {**example, '@resources': write_resources(
            root, getattr(pipeline.policy, 'resources', {}))}
        built, _ = compile_groups(root, graph, groups, modules, provisional, spec, rewrites,
                                  say, placeholders=variants)
        write_plan(root, graph, BuildPlan(
            target=spec.target, groups=tuple(built), phases=phases(graph),
            coverage=coverage(graph, assignments), options=spec.build.to_dict()),
            spec, pipeline)
        refusals = rewrites.low_precision_refusals(modules) \
            if rewrites.low_precision_refusals else {}
        chosen, records, evidence = plan_modules(
            open_artifact(root, verify=False), variants, spec, pipeline, refusals, say, device,
            **({'timer': timer} if timer else {}))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    details = {}
    for name, linears in chosen.items():
        details.update(variants[name].apply(linears, modules))
    variants.clear()  # the eager copies: GPU memory the build needs
    if device.startswith('cuda'):
        import torch
        torch.cuda.empty_cache()
    return {**results, 'precision_plan': PassResult(bool(details), details)}, records, evidence


def reference_device(target: str) -> str:
    """Where the eager reference runs while compiling: the GPU for a GPU target (a full-size
    policy takes minutes per eager call on a CPU, and the cuda backend exports on the device the
    modules are on), else the CPU. The weights are drawn on the CPU either way (weights.py), so
    the artifact does not depend on where it was built."""
    if target != 'cuda':
        return 'cpu'
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError('target cuda: build on a machine with a CUDA GPU (torch sees none)')
    return 'cuda'


def compile_spec(spec_path: 'str | Spec', out: str, progress=None,
                 measure_tiles: bool = False) -> BuildResult:
    """Build the spec's artifact into `out`: a spec file's path, or a Spec already parsed (an
    edited one: lamp_ros.spec.edited_spec). `measure_tiles`: time every tuned choice on the
    build GPU even where the tile cache holds one (evidence/build.json records it; the choices
    themselves are in plan.json either way)."""
    say = progress or (lambda msg: None)
    timings = {}
    clock = [time.perf_counter()]

    def done(stage: str) -> None:
        now = time.perf_counter()
        timings[stage] = round(now - clock[0], 3)
        clock[0] = now

    from lamp_ros.trace.from_spec import build_pipeline, trace_pipeline

    say('load spec')
    spec = spec_path if isinstance(spec_path, Spec) else load_spec(spec_path)
    done('spec')
    device = reference_device(spec.target)
    say(f'build eager pipeline ({device})')
    pipeline = build_pipeline(spec, device=device)
    done('pipeline')
    example = {}
    obs = pipeline.example_observation()
    rewrites = rewrites_for(pipeline.policy)
    applied = enabled_passes(rewrites, spec.passes)
    letterbox = spec.fusion.get('device_letterbox')
    # With passes, the device letterbox or a precision plan on, the model stages are exported
    # and their weights hashed once, after them (record_passes).
    rewritten = bool(applied or letterbox or spec.precision.auto)
    graph = trace_pipeline(pipeline, obs, export=not rewritten, name=spec.name, progress=say,
                           values_out=example, hash_weights=not rewritten)
    check_spec_fits(spec, graph)
    done('trace')
    modules, results, idle = stage_modules(graph, pipeline.policy), {}, []
    if applied:
        say(f'graph passes: {", ".join(applied)}')
        modules, results = run_passes(rewrites, modules, spec.passes)
        idle = [name for name, result in results.items() if not result.changed]
        if idle:  # switched on, found nothing to do: not recorded as applied
            say(f'graph passes that changed nothing here: {", ".join(idle)}')
        applied = tuple(name for name, result in results.items() if result.changed)
    if letterbox:
        say('device letterbox: ' + ', '.join(f'{s} up to {h}x{w}'
                                             for s, (h, w) in letterbox.items()))
        graph, modules = letterbox_on_device(graph, modules, letterbox, example,
                                             rewrites.letterbox_stage)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    planned, module_evidence = {}, {}
    if rewritten:
        if spec.precision.auto:  # groups planned on their modules, before they are built
            results, planned, module_evidence = plan_module_precision(
                spec, pipeline, graph, modules, results, example, rewrites, parent, device, say)
            if planned:
                done('precision_plan_modules')
        graph = record_passes(graph, modules, results, example, progress=say)
        done('passes')
    say('partition')
    assignments = assign(graph, spec)
    groups = partition(graph, spec, assignments)
    done('partition')

    root = tempfile.mkdtemp(prefix='.lamp-build-', dir=parent)
    try:
        write_weights(root, modules)
        resources = write_resources(root, getattr(pipeline.policy, 'resources', {}))
        provenance = getattr(pipeline.policy, 'provenance', None)
        if provenance:  # an imported checkpoint: its files' sha256 and each tensor's source
            _dump(root, PROVENANCE, provenance)
        example['@resources'] = resources
        done('weights')
        built, group_evidence = compile_groups(root, graph, groups, modules, example, spec,
                                               rewrites, say, measure_tiles, planned=planned)
        done('compile_groups')
        plan = BuildPlan(target=spec.target, groups=tuple(built), phases=phases(graph),
                         coverage=coverage(graph, assignments), passes=applied,
                         options=spec.build.to_dict())
        say('memory plan')
        abi, versions = write_plan(root, graph, plan, spec, pipeline)
        done('memory_plan')

        if spec.precision.auto:
            from lamp_ros.compiler.precision_plan import plan_precision, render_precision
            plan, precision = plan_precision(root, spec, pipeline, say, module_evidence)
            _dump(root, 'plan.json', plan.to_dict())
            _dump(root, 'evidence/precision.json', precision)
            render_precision(precision, os.path.join(root, 'evidence', 'precision.png'))
            write_manifest(root, spec.target, abi, versions, spec.name)
            done('precision_plan')

        from lamp_ros.runtime import Runtime
        say('parity against the eager reference')
        runtime = Runtime.load(root)
        evidence, inputs, expected = run_parity(
            pipeline, runtime, int(spec.parity['samples']), float(spec.parity['atol']),
            float(spec.parity['rtol']), progress=say,
            missing_camera=spec.parity_missing_camera)
        _dump(root, 'evidence/parity.json', evidence)
        _save_tensors(root, 'evidence/parity_inputs.safetensors', inputs)
        _save_tensors(root, 'evidence/parity_expected.safetensors', expected)
        done('parity')
        _dump(root, 'evidence/build.json', {'stage_seconds': timings, 'tools': versions,
                                            'spec': os.path.basename(spec.source),
                                            'measure_tiles': measure_tiles,
                                            'passes_without_effect': idle,
                                            'groups': group_evidence})
        manifest = write_manifest(root, spec.target, abi, versions, spec.name)
        for base, dirs, files in os.walk(root):  # mkdtemp/safetensors create private modes
            for name in dirs:
                os.chmod(os.path.join(base, name), 0o755)
            for name in files:
                os.chmod(os.path.join(base, name), 0o644)
        os.chmod(root, 0o755)
        if os.path.exists(out):
            shutil.rmtree(out)
        os.replace(root, out)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return BuildResult(out, manifest['artifact_id'], evidence['passed'], evidence, timings)
