"""`lamp verify`: does the artifact still hold what its manifest and evidence promise?

Four checks in order, each naming the file or value at fault: the manifest (schema version, id
over its own content), every file's size and sha256, the schemas of graph/plan/memory (node
hashes, lint, every node in exactly one group), and parity re-run: the Runtime (no torch) runs
the stored parity inputs and must reproduce the stored eager outputs within the stored
tolerance. A failed check stops the ones that depend on it (no parity on tampered files).
"""

from dataclasses import dataclass
import json
import os

from rich.console import Console
from rich.markup import escape

from lamp_ros.artifact.load import open_artifact
from lamp_ros.artifact.manifest import ArtifactError, read_manifest, verify_files
from lamp_ros.artifact.compare import compare
from lamp_ros.whitebox.inspect import PARITY, read_evidence

INPUTS = 'evidence/parity_inputs.safetensors'
EXPECTED = 'evidence/parity_expected.safetensors'


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str


def check_schema(root: str) -> str:
    """'' when graph, plan and memory are well formed and consistent, else the problem."""
    artifact = open_artifact(root, verify=False)  # schemas, saved node hashes, target, ABI
    artifact.graph.lint()
    members = [n for g in artifact.plan.groups for n in g.nodes]
    graph_nodes = [n.id for n in artifact.graph.nodes]
    if sorted(members) != sorted(graph_nodes):
        extra = sorted(set(members) ^ set(graph_nodes)) or sorted(
            n for n in members if members.count(n) > 1)
        return f'plan.json: groups do not cover each graph node exactly once ({extra})'
    missing = [n for n in graph_nodes if n not in artifact.plan.phases]
    if missing:
        return f'plan.json: nodes without a phase: {missing}'
    for key in ('arenas', 'summary'):
        if key not in artifact.memory:
            return f'memory.json: missing field {key!r}'
    return ''


def stored_observations(root: str) -> tuple:
    """The parity samples the build stored (evidence/parity_inputs.safetensors) -> ([{'obs',
    'committed', 'delay', 'end'}], problems: one message per sample that cannot be read)."""
    from safetensors.numpy import load_file
    evidence = read_evidence(root, PARITY)
    if evidence is None:
        return [], [f'{PARITY}: missing']
    inputs = load_file(os.path.join(root, INPUTS))
    samples, problems = [], []
    for i, prompt in enumerate(evidence['prompts']):
        images = {k.split('/images.', 1)[1]: v for k, v in inputs.items()
                  if k.startswith(f'{i}/images.')}
        if f'{i}/state' not in inputs:
            problems.append(f'{INPUTS}: no {i}/state for sample {i}')
            continue
        delay, end = inputs.get(f'{i}/rtc_delay_end', (None, None))
        samples.append({'index': i, 'obs': {'images': images, 'state': inputs[f'{i}/state'],
                                            'prompt': prompt},
                        'committed': inputs.get(f'{i}/committed'), 'delay': delay,
                        'end': end, 't': float(evidence.get('t', 0.0))})
    return samples, problems


def rerun_parity(root: str) -> list:
    """Re-run the stored parity samples; one message per output that misses the tolerance."""
    from safetensors.numpy import load_file

    from lamp_ros.runtime import Runtime
    evidence = read_evidence(root, PARITY)
    if evidence is None:
        return [f'{PARITY}: missing']
    samples, problems = stored_observations(root)
    expected = load_file(os.path.join(root, EXPECTED))
    atol, rtol = evidence['tolerance']['atol'], evidence['tolerance']['rtol']
    runtime = Runtime.load(root, execution='sync')
    try:
        for sample in samples:
            i = sample['index']
            runtime.reset()
            outputs = runtime.run(runtime.feeds(sample['obs'], sample['t'],
                                                committed=sample['committed'],
                                                delay=sample['delay'], end=sample['end']))
            for name, value in outputs.items():
                key = f'{i}/{name}'
                if key not in expected:
                    problems.append(f'{EXPECTED}: no expected value {key!r} for output {name}')
                    continue
                result = compare(value, expected[key], atol, rtol)
                if not result['passed']:
                    detail = result.get('error') or (
                        f'{result["mismatches"]} mismatches' if 'mismatches' in result
                        else f'max abs {result["max_abs"]:.3g}')
                    problems.append(f'output {name}: sample {i} differs from {EXPECTED} '
                                    f'({detail}; atol {atol}, rtol {rtol})')
    finally:
        runtime.close()
    return problems


def verify_artifact(path: str) -> list:
    """-> [Check] in order; the artifact holds when every check passed."""
    root = os.path.abspath(path)
    checks = []
    try:
        manifest = read_manifest(root)
        checks.append(Check('manifest', True, f'schema {manifest["schema_version"]}, id '
                                              f'{manifest["artifact_id"][:16]}'))
    except ArtifactError as exc:
        return [Check('manifest', False, str(exc))]
    try:
        verify_files(root, manifest)
        listed = len(manifest['files']) + len(manifest.get('volatile', {}))
        checks.append(Check('checksums', True, f'{listed} files, sizes and sha256 match'))
    except ArtifactError as exc:
        return checks + [Check('checksums', False, str(exc))]
    try:
        problem = check_schema(root)
    except (ArtifactError, KeyError, TypeError, ValueError) as exc:
        problem = str(exc)
    checks.append(Check('schema', not problem, problem or 'graph, plan and memory consistent'))
    if problem:
        return checks
    evidence = read_evidence(root, PARITY) or {}
    if not evidence.get('passed'):
        failed = [n for n, w in evidence.get('worst', {}).items() if not w['passed']]
        checks.append(Check('evidence', False, f'{PARITY}: the build recorded a parity failure '
                                               f'at {failed or "(no evidence)"}'))
    else:
        checks.append(Check('evidence', True, f'{PARITY}: passed at build time'))
    try:
        problems = rerun_parity(root)
    except (ArtifactError, KeyError, OSError, ValueError) as exc:
        problems = [str(exc)]
    samples = len(evidence.get('prompts', []))
    checks.append(Check('parity', not problems, '; '.join(problems) or
                        f'{samples} samples reproduce {EXPECTED} within tolerance'))
    return checks


def run_verify(path: str, as_json: bool = False) -> int:
    """`lamp verify`: 0 only when every check passed; otherwise 1 and the failures."""
    checks = verify_artifact(path)
    passed = all(c.passed for c in checks)
    if as_json:
        print(json.dumps({'passed': passed, 'checks': [c.__dict__ for c in checks]}, indent=1))
    else:
        console = Console(width=max(120, Console().width))
        for c in checks:
            mark = '[green]ok[/]  ' if c.passed else '[red]FAIL[/]'
            console.print(f'{mark} {c.name:10s} {escape(c.message)}')
        console.print(f'{escape(path)}: ' + ('[green]verified[/]' if passed else
                                             '[red]verification failed[/]'))
    return 0 if passed else 1
