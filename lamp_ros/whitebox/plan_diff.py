"""`lamp diff`'s comparison of two build plans (plan.json): the plan itself and the precision
plans of its groups.

plan.json is in the artifact id, so every key of it is compared: the ones a reader asks about
by name (per node: backend, precision, device, group, phase; per group: its members, side
stages, prompt lengths, stored GEMM algorithms, tiles, exporter; the passes, the spec's build
options) and, generically, the rest: a group's inputs, outputs and reason, every other key of
its `build` entry (the ONNX file, its weight bindings, the int8 layers...), the coverage. Groups
are matched by their members, since their names are positional.

A group's `build.precision_plan` (compiler/precision_plan.py, precision_modules.py: which layers
a measured plan lowered to int8 or FP8, and why each other one was kept) is a cause of its own,
`precision_plan`: the layers lowered in B and not in A, those back in the group precision, and
every layer whose decision changed.
"""

from lamp_ros.backends.text_lengths import captured_lengths
from lamp_ros.whitebox.json_diff import deep_diff

# the `build` keys each named group field reads; a key whose field is equal while the key is
# not (a prompt-length check measured again, say) is compared with the rest of `build`
NAMED_BUILD_KEYS = {'text_lengths': ('text', 'text_onnx', 'text_check'),
                    'gemm_algorithms': ('cublaslt',), 'tiles': ('tiles',),
                    'exporter': ('exporter',)}
PRECISION_PLAN = 'precision_plan'  # build key of a measured precision plan: its own cause


def _group_row(g) -> dict:
    build = g.build or {}
    return {'name': g.name, 'backend': g.backend, 'precision': g.precision, 'device': g.device,
            'nodes': list(g.nodes), 'side_stages': list(g.side_stages),
            'text_lengths': captured_lengths(build),
            'gemm_algorithms': build.get('cublaslt'),
            'tiles': build.get('tiles'),
            'exporter': build.get('exporter')}


def _build_rest(x, y, named: dict) -> dict:
    """The differing keys of two groups' `build` entries that no differing named field
    stands for, the precision plan aside: {key: [a, b]}, or for two mappings (the weight
    bindings) {key: {'entries': their differing keys}}."""
    ba, bb = x.build or {}, y.build or {}
    covered = {PRECISION_PLAN} | {key for field, keys in NAMED_BUILD_KEYS.items()
                                  if field in named for key in keys}
    out = {}
    for key in sorted((set(ba) | set(bb)) - covered):
        a, b = ba.get(key), bb.get(key)
        if a == b:
            continue
        out[key] = {'entries': sorted(deep_diff(a, b))} \
            if isinstance(a, dict) and isinstance(b, dict) else [a, b]
    return out


def _group_change(x, y) -> dict:
    change = deep_diff(_group_row(x), _group_row(y))
    for field in ('inputs', 'outputs', 'reason'):
        if getattr(x, field) != getattr(y, field):
            change[field] = [getattr(x, field), getattr(y, field)]
    rest = _build_rest(x, y, change)
    if rest:
        change['build'] = rest
    return change


def diff_plan(pa, pb) -> dict:
    """Per node: backend, precision, device and group membership; per group (matched by its
    members, since names are positional): added, removed, or changed attributes (the ONNX
    exporter and every other key of its build entry among them); the passes applied, the
    spec's build options, and any other key of the plan (the coverage)."""
    out = {}
    if pa.target != pb.target:
        out['target'] = [pa.target, pb.target]
    if list(pa.passes) != list(pb.passes):
        out['passes'] = [list(pa.passes), list(pb.passes)]
    if pa.options != pb.options:
        out['options'] = deep_diff(pa.options, pb.options)
    da, db = pa.to_dict(), pb.to_dict()
    for key in sorted((set(da) | set(db)) - {'target', 'passes', 'options', 'groups',
                                             'phases'}):
        if da.get(key) != db.get(key):
            out[key] = deep_diff(da.get(key), db.get(key))
    ga = {n: g for g in pa.groups for n in g.nodes}
    gb = {n: g for g in pb.groups for n in g.nodes}
    nodes = {}
    for node in [n for n in gb if n in ga]:
        x, y = ga[node], gb[node]
        change = {f: [getattr(x, f), getattr(y, f)] for f in ('backend', 'precision', 'device')
                  if getattr(x, f) != getattr(y, f)}
        if x.nodes != y.nodes:
            change['group'] = [{'name': x.name, 'nodes': list(x.nodes)},
                               {'name': y.name, 'nodes': list(y.nodes)}]
        if pa.phases.get(node) != pb.phases.get(node):
            change['phase'] = [pa.phases.get(node), pb.phases.get(node)]
        if change:
            nodes[node] = change
    phases = deep_diff({n: p for n, p in pa.phases.items() if n not in gb or n not in ga},
                       {n: p for n, p in pb.phases.items() if n not in gb or n not in ga})
    if phases:  # nodes in no group of one side (a plan's own business, named all the same)
        out['phases'] = phases
    by_members_a = {g.nodes: g for g in pa.groups}
    by_members_b = {g.nodes: g for g in pb.groups}
    groups = {'added': [_group_row(g) for m, g in by_members_b.items() if m not in by_members_a],
              'removed': [_group_row(g) for m, g in by_members_a.items()
                          if m not in by_members_b],
              'changed': {}, 'renamed': {}}
    for members, y in by_members_b.items():
        x = by_members_a.get(members)
        if x is not None:
            change = _group_change(x, y)
            if change.pop('name', None):  # names are positional: a rename is no change
                groups['renamed'][x.name] = y.name
            if change:
                groups['changed'][y.name] = change
    if nodes:
        out['nodes'] = nodes
    out.update({f'groups_{k}': v for k, v in groups.items() if v})
    return out


# ---- precision plans -------------------------------------------------------------------------

def _low(record: dict) -> set:
    """The layers a precision plan record runs in its low precision."""
    return {name for name, d in (record.get('layers') or {}).items()
            if d.get('precision') == record.get('lowered_to')}


def precision_change(ra: dict | None, rb: dict | None) -> dict:
    """What differs between two groups' precision plan records (None: no plan): `lowered_to`,
    the low precision of each side (int8, fp8; None: no plan); `lowered`,
    the layers in low precision in B and not in A; `restored`, the reverse; `low_precision`,
    how many layers of how many candidates on each side; `layers`, {layer: [A's decision,
    B's decision]} for every layer whose precision or reason differs; and any other key of
    the records (the precision, the GPU a cuda plan was timed on) as [a, b]."""
    ra, rb = ra or {}, rb or {}
    change = {key: [ra.get(key), rb.get(key)] for key in sorted((set(ra) | set(rb)) - {'layers'})
              if ra.get(key) != rb.get(key) or key == 'lowered_to'}
    low_a, low_b = _low(ra), _low(rb)
    la, lb = ra.get('layers') or {}, rb.get('layers') or {}
    change.update(
        lowered=sorted(low_b - low_a), restored=sorted(low_a - low_b),
        low_precision=[[len(low_a), len(la)], [len(low_b), len(lb)]],
        layers={name: [la.get(name), lb.get(name)] for name in sorted(set(la) | set(lb))
                if la.get(name) != lb.get(name)})
    return change


def diff_precision_plans(pa, pb) -> dict:
    """{group: precision_change} for every group (matched by its members; B's name, or A's
    where B has no such group) whose precision plan differs."""
    by_members_a = {g.nodes: g for g in pa.groups}
    by_members_b = {g.nodes: g for g in pb.groups}
    out = {}
    for members in list(by_members_b) + [m for m in by_members_a if m not in by_members_b]:
        x, y = by_members_a.get(members), by_members_b.get(members)
        ra = (x.build or {}).get(PRECISION_PLAN) if x is not None else None
        rb = (y.build or {}).get(PRECISION_PLAN) if y is not None else None
        if ra != rb:
            out[(y or x).name] = precision_change(ra, rb)
    return out
