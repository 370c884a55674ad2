"""manifest.json: schema version, identity, target, ABI and every file with its sha256.

A file of more than PIECE_BYTES has a sha256 per piece of that size instead of one for the whole
file (schema 2): one digest is a sequential computation, so a safetensors file of several GB
held every load and every build's manifests on one core for seconds, while its pieces are
checked on all of them (docs/notebook/). Schema 1 manifests (one sha256 per file) are still
read.

The artifact id is the sha256 of the canonical manifest (without the id itself), so it changes
exactly when a file that decides behaviour, the target, the ABI or the tool versions change.
Everything under evidence/ (build timings and host, how tuned choices were made, the parity
run, a saved runtime profile) is what a build or a run measured, which differs between two
builds of one spec: those files are listed under `volatile`, still checksummed at load, but
left out of the id, so a fresh build and a rebuild from a warm tile cache of the same spec
give the same id (and `lamp diff` lists their evidence apart from behaviour).
"""

from concurrent.futures import ThreadPoolExecutor
import hashlib
import json
import os

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)  # 1: one sha256 per file
PIECE_BYTES = 256 << 20
MANIFEST = 'manifest.json'
EVIDENCE = 'evidence/'  # measured by the build or a run: checksummed, not part of the id


def is_volatile(rel: str) -> bool:
    return rel.startswith(EVIDENCE)


def sha256_file(path: str) -> str:
    return _sha256_range(path, 0, None)


def _sha256_range(path: str, offset: int, length: int | None) -> str:
    """sha256 of `length` bytes from `offset` (None: to the end). A file shorter than asked
    gives the digest of what is there, which then does not match."""
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        f.seek(offset)
        left = length
        while left is None or left > 0:
            block = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not block:
                break
            digest.update(block)
            if left is not None:
                left -= len(block)
    return digest.hexdigest()


def hash_threads() -> int:
    """Threads that hash files or tensors at once (reads, copies and hashlib release the GIL):
    a full-size artifact holds several GB, hashed at every build and every load."""
    return min(8, os.cpu_count() or 1)


def _pieces(size: int, piece_bytes: int | None) -> list:
    """[(offset, length)] of a file's pieces; one piece of the whole file (length None)."""
    if not piece_bytes:
        return [(0, None)]
    return [(o, min(piece_bytes, size - o)) for o in range(0, size, piece_bytes)] or [(0, 0)]


def sha256_pieces(root: str, layout: dict) -> dict:
    """{rel path: piece bytes or None (the whole file)} -> {rel path: [sha256 of each piece]},
    every piece of every file hashed on `hash_threads()` threads (reads and hashlib release
    the GIL)."""
    jobs = [(rel, offset, length) for rel, piece_bytes in layout.items()
            for offset, length in _pieces(os.path.getsize(os.path.join(root, rel)),
                                          piece_bytes)]
    with ThreadPoolExecutor(max_workers=hash_threads()) as pool:
        digests = pool.map(lambda job: _sha256_range(os.path.join(root, job[0]), *job[1:]),
                           jobs)
        out = {rel: [] for rel in layout}
        for (rel, _, _), digest in zip(jobs, digests):
            out[rel].append(digest)
        return out


def content_digest(entry: dict) -> str:
    """One string per file content from its manifest entry (the whole file's sha256, or one
    over its pieces' digests): between entries of the same layout, equal exactly when the
    content is. A file hashed whole and one hashed in pieces give different strings, so a diff
    against an artifact from before the pieces (schema 1) lists its large files as changed, and
    the weights diff then compares their tensors."""
    if 'sha256' in entry:
        return entry['sha256']
    text = f'{entry["piece_bytes"]}:' + ','.join(entry['sha256_pieces'])
    return 'pieces:' + hashlib.sha256(text.encode()).hexdigest()


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
    sizes = {p: os.path.getsize(os.path.join(root, p)) for p in paths}
    layout = {p: PIECE_BYTES if sizes[p] > PIECE_BYTES else None for p in paths}
    digests = sha256_pieces(root, layout)
    return {p: {'size': sizes[p], 'sha256': digests[p][0]} if layout[p] is None else
            {'size': sizes[p], 'piece_bytes': PIECE_BYTES, 'sha256_pieces': digests[p]}
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
        'files': _entries(root, [f for f in files if not is_volatile(f)]),
        'volatile': _entries(root, [f for f in files if is_volatile(f)]),
    }
    manifest['artifact_id'] = artifact_id(manifest)
    with open(os.path.join(root, MANIFEST), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


PROVENANCE = 'provenance.json'  # where the weights came from (an imported checkpoint), if known


def read_provenance(root: str) -> dict | None:
    """The artifact's provenance.json (checkpoint format, files and their sha256, the source
    of every tensor), or None for weights lamp drew itself."""
    path = os.path.join(root, PROVENANCE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding='utf-8') as f:
        return json.load(f)


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
    if manifest['schema_version'] not in READABLE_SCHEMAS:
        raise ArtifactError(f'{MANIFEST}: schema_version {manifest["schema_version"]} is not '
                            f'supported (this runtime reads '
                            f'{", ".join(map(str, READABLE_SCHEMAS))})')
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
    for rel, entry in listed.items():
        if 'sha256' not in entry and not (isinstance(entry.get('piece_bytes'), int)
                                          and entry['piece_bytes'] > 0
                                          and isinstance(entry.get('sha256_pieces'), list)):
            raise ArtifactError(f'{MANIFEST}: {rel} has neither a sha256 nor sha256_pieces '
                                'with piece_bytes')
    layout = {rel: None if 'sha256' in e else e['piece_bytes'] for rel, e in listed.items()}
    digests = sha256_pieces(root, layout)
    for rel, entry in sorted(listed.items()):
        want = [entry['sha256']] if 'sha256' in entry else entry['sha256_pieces']
        if len(want) != len(digests[rel]):
            raise ArtifactError(f'{rel}: {len(digests[rel])} pieces of '
                                f'{entry["piece_bytes"]} bytes, manifest lists {len(want)}')
        for i, (got, expected) in enumerate(zip(digests[rel], want)):
            if got != expected:
                where = '' if layout[rel] is None else \
                    f' in bytes {i * layout[rel]}-{min((i + 1) * layout[rel], entry["size"])}'
                raise ArtifactError(f'{rel}: sha256 mismatch{where} (file modified since the '
                                    'build)')
    extra = sorted(set(list_files(root)) - set(listed))
    if extra:
        raise ArtifactError(f'{extra[0]}: not listed in the manifest ({len(extra)} unlisted)')
