"""Open an artifact for running: manifest, checksums, schema, target and plan, checked.

Everything here is plain JSON and numpy: no torch, no compiler. Every refusal names the file or
field at fault, because "it doesn't load" is not something a robot operator can act on.
"""

from dataclasses import dataclass
import json
import os

from lamp_ros.artifact.manifest import ArtifactError, read_manifest, verify_files
from lamp_ros.artifact.plan import BuildPlan
from lamp_ros.graph.graph import Graph


@dataclass(frozen=True)
class Artifact:
    root: str
    manifest: dict
    graph: Graph
    plan: BuildPlan
    memory: dict
    resources: dict   # resource name -> absolute path

    @property
    def id(self) -> str:
        return self.manifest['artifact_id']


def _json(root: str, rel: str) -> dict:
    try:
        with open(os.path.join(root, rel), encoding='utf-8') as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f'{rel}: cannot read ({exc})') from exc


def open_artifact(path: str, verify: bool = True) -> Artifact:
    """Read and check an artifact directory (checksums of every file when verify)."""
    root = os.path.abspath(path)
    if not os.path.isdir(root):
        raise ArtifactError(f'{path}: no such artifact directory')
    manifest = read_manifest(root)
    if verify:
        verify_files(root, manifest)
    try:
        graph = Graph.from_dict(_json(root, 'graph.json'))
        plan = BuildPlan.from_dict(_json(root, 'plan.json'))
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f'graph.json/plan.json: invalid ({exc})') from exc
    if plan.target != manifest['target']:
        raise ArtifactError(f'plan.json: target {plan.target!r} differs from the manifest\'s '
                            f'{manifest["target"]!r}')
    abi_inputs = set(manifest['abi']['inputs'])
    if abi_inputs != set(graph.inputs):
        raise ArtifactError(f'manifest.json: abi.inputs {sorted(abi_inputs)} do not match '
                            f'graph.json inputs {sorted(graph.inputs)}')
    folder = os.path.join(root, 'resources')  # files the host stages read, by name
    resources = {name: os.path.join(folder, name) for name in sorted(os.listdir(folder))} \
        if os.path.isdir(folder) else {}
    return Artifact(root, manifest, graph, plan, _json(root, 'memory.json'), resources)
