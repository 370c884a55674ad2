"""manifest.json: schema version, identity, target, ABI and every file with its sha256.

The artifact id is the sha256 of the canonical manifest (without the id itself), so it changes
exactly when a file, the target, the ABI or the tool versions change. Files whose content is
expected to differ between two identical builds (build timings, a saved runtime profile) are
listed under `volatile`:
still checksummed at load, but left out of the id, so two compiles of the same spec on the same
machine give the same id.
"""

from concurrent.futures import ThreadPoolExecutor
import hashlib
import json
import os

SCHEMA_VERSION = 1
MANIFEST = 'manifest.json'
VOLATILE = ('evidence/build.json', 'evidence/profile.json')


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def hash_threads() -> int:
    """Threads that hash files or tensors at once (reads, copies and hashlib release the GIL):
    a full-size artifact holds several GB, hashed at every build and every load."""
    return min(8, os.cpu_count() or 1)


def sha256_files(root: str, paths) -> dict:
    """rel path -> sha256, the files hashed on `hash_threads()` threads."""
    paths = list(paths)
    with ThreadPoolExecutor(max_workers=hash_threads()) as pool:
        digests = pool.map(sha256_file, [os.path.join(root, p) for p in paths])
        return dict(zip(paths, digests))


def list_files(root: str) -> list:
    """Every file below root except the manifest, as sorted relative POSIX paths."""
    out = []
    for base, _, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(base, name), root).replace(os.sep, '/')
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def _entries(root: str, paths) -> dict:
    digests = sha256_files(root, paths)
    return {p: {'size': os.path.getsize(os.path.join(root, p)), 'sha256': digests[p]}
            for p in paths}


def artifact_id(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k not in ('artifact_id', 'volatile')}
    text = json.dumps(body, sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(root: str, target: str, abi: dict, created_by: dict, name: str) -> dict:
    files = list_files(root)
    manifest = {
        'schema_version': SCHEMA_VERSION,
        'name': name,
        'target': target,
        'abi': abi,
        'created_by': created_by,
        'files': _entries(root, [f for f in files if f not in VOLATILE]),
        'volatile': _entries(root, [f for f in files if f in VOLATILE]),
    }
    manifest['artifact_id'] = artifact_id(manifest)
    with open(os.path.join(root, MANIFEST), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


class ArtifactError(ValueError):
    """The artifact is corrupt, incomplete, tampered with or made for something else."""


def read_manifest(root: str) -> dict:
    path = os.path.join(root, MANIFEST)
    if not os.path.isfile(path):
        raise ArtifactError(f'{path}: missing (not an artifact directory?)')
    try:
        with open(path, encoding='utf-8') as f:
            manifest = json.load(f)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f'{path}: not valid JSON ({exc})') from exc
    for key in ('schema_version', 'artifact_id', 'target', 'abi', 'files'):
        if key not in manifest:
            raise ArtifactError(f'{MANIFEST}: missing field {key!r}')
    if manifest['schema_version'] != SCHEMA_VERSION:
        raise ArtifactError(f'{MANIFEST}: schema_version {manifest["schema_version"]} is not '
                            f'supported (this runtime reads {SCHEMA_VERSION})')
    if artifact_id(manifest) != manifest['artifact_id']:
        raise ArtifactError(f'{MANIFEST}: artifact_id does not match its content (edited?)')
    return manifest


def verify_files(root: str, manifest: dict) -> None:
    """Every listed file present with its size and sha256; no unlisted files."""
    listed = {**manifest['files'], **manifest.get('volatile', {})}
    for rel, entry in sorted(listed.items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            raise ArtifactError(f'{rel}: listed in the manifest but missing')
        size = os.path.getsize(path)
        if size != entry['size']:
            raise ArtifactError(f'{rel}: size {size} bytes, manifest says {entry["size"]} '
                                '(truncated or replaced)')
    digests = sha256_files(root, sorted(listed))
    for rel, entry in sorted(listed.items()):
        if digests[rel] != entry['sha256']:
            raise ArtifactError(f'{rel}: sha256 mismatch (file modified since the build)')
    extra = sorted(set(list_files(root)) - set(listed))
    if extra:
        raise ArtifactError(f'{extra[0]}: not listed in the manifest ({len(extra)} unlisted)')
