"""Compile-time memory planner: give every intermediate value an offset in one arena per device.

Preallocating every buffer is what lets a whole inference run as one CUDA graph with no
allocator calls, and reusing the addresses of dead values keeps that arena small. Placement
is TFLite/XLA's "greedy by size" with best-fit offsets: the biggest buffers go first because
they are the hardest to fit, each into the tightest address gap left by buffers alive at the
same time. The plan reports the naive sum, the lower bound (most bytes live at any one step)
and the arena it got, so a regression in reuse shows up as a number, not as an OOM.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
import os

import numpy as np

DEFAULT_ALIGNMENT = 64
_BUFFER_KEYS = ('name', 'size', 'offset', 'first_use', 'last_use', 'device')
_STAT_KEYS = ('naive_bytes', 'lower_bound_bytes', 'arena_bytes')


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class BufferRequest:
    """A value that needs memory from the step producing it to its last reader, inclusive."""

    name: str
    size: int
    first_use: int
    last_use: int
    device: str = 'cpu'
    alignment: int = DEFAULT_ALIGNMENT

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f'buffer name must be a non-empty string, got {self.name!r}')
        where = f'buffer {self.name!r}'
        if self.size <= 0:
            raise ValueError(f'{where}: size must be > 0 bytes, got {self.size}')
        if not 0 <= self.first_use <= self.last_use:
            raise ValueError(f'{where}: needs 0 <= first_use <= last_use, '
                             f'got {self.first_use}..{self.last_use}')
        if self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise ValueError(f'{where}: alignment must be a power of two, got {self.alignment}')

    @property
    def aligned_size(self) -> int:
        """Bytes reserved: rounded up so the next buffer's offset stays aligned."""
        return _align(self.size, self.alignment)


@dataclass(frozen=True)
class PlacedBuffer:
    """A request with its byte offset inside its device's arena; size is the requested one."""

    name: str
    size: int
    offset: int
    first_use: int
    last_use: int
    device: str

    def lives_with(self, other: 'PlacedBuffer') -> bool:
        """Whether both are alive at some step; an op reads inputs while writing outputs."""
        return self.first_use <= other.last_use and other.first_use <= self.last_use


@dataclass(frozen=True)
class ArenaPlan:
    """One device's arena: where each buffer lives and how close the arena is to the bound."""

    device: str
    buffers: tuple[PlacedBuffer, ...]
    naive_bytes: int
    lower_bound_bytes: int
    arena_bytes: int

    @property
    def efficiency(self) -> float:
        """Lower bound / arena: 1.0 means no planner could use fewer bytes."""
        return self.lower_bound_bytes / self.arena_bytes if self.arena_bytes else 1.0


@dataclass(frozen=True)
class MemoryPlan:
    """All arenas of a compiled graph, one per device, saved with the artifact as JSON."""

    arenas: tuple[ArenaPlan, ...]

    def to_dict(self) -> dict:
        """Return a JSON-ready dict with a summary over all arenas first, for quick reading."""
        totals = {k: sum(getattr(a, k) for a in self.arenas) for k in _STAT_KEYS}
        arena = totals['arena_bytes']
        summary = dict(totals, efficiency=totals['lower_bound_bytes'] / arena if arena else 1.0,
                       buffers=sum(len(a.buffers) for a in self.arenas))
        return {'summary': summary, 'arenas': [
            dict({'device': a.device}, **{k: getattr(a, k) for k in _STAT_KEYS},
                 efficiency=a.efficiency,
                 buffers=[{k: getattr(b, k) for k in _BUFFER_KEYS} for b in a.buffers])
            for a in self.arenas]}

    @classmethod
    def from_dict(cls, d: Mapping) -> 'MemoryPlan':
        """Rebuild a plan saved by to_dict, refusing one that a hand edit made unsafe."""
        try:
            plan = cls(tuple(
                ArenaPlan(a['device'], tuple(PlacedBuffer(**{k: b[k] for k in _BUFFER_KEYS})
                                             for b in a['buffers']),
                          *(a[k] for k in _STAT_KEYS))
                for a in d['arenas']))
            _check_structure(plan)
        except (KeyError, TypeError) as e:
            raise ValueError(f'memory plan dict is malformed: {type(e).__name__}: {e}') from e
        verify_plan(plan, alignment=1)
        if 'summary' in d and d['summary'] != plan.to_dict()['summary']:
            raise ValueError(f'memory plan summary {d["summary"]} does not match its arenas')
        return plan

    def buffer(self, name: str) -> PlacedBuffer:
        """Return the placed buffer of a value, whichever arena holds it."""
        for arena in self.arenas:
            for b in arena.buffers:
                if b.name == name:
                    return b
        known = sorted(b.name for a in self.arenas for b in a.buffers)
        more = f' and {len(known) - 5} more' if len(known) > 5 else ''
        raise KeyError(f'no buffer {name!r} in the memory plan; known: {known[:5]}{more}')


def _check_structure(plan: MemoryPlan) -> None:
    """Check what verify_plan does not: ordering, unique names, sane fields and totals."""
    devices = [a.device for a in plan.arenas]
    if devices != sorted(set(devices)):
        raise ValueError(f'arenas must have unique devices in sorted order, got {devices}')
    names = set()
    for a in plan.arenas:
        if list(a.buffers) != sorted(a.buffers, key=lambda b: (b.offset, b.name)):
            raise ValueError(f'arena {a.device!r}: buffers must be sorted by offset, then name')
        for b in a.buffers:
            BufferRequest(b.name, b.size, b.first_use, b.last_use, b.device, alignment=1)
            if b.name in names:
                raise ValueError(f'buffer {b.name!r} appears twice in the memory plan')
            names.add(b.name)
            if b.device != a.device or b.offset < 0:
                raise ValueError(f'buffer {b.name!r}: device {b.device!r} offset {b.offset} '
                                 f'does not belong in arena {a.device!r}')
        if sum(b.size for b in a.buffers) > a.naive_bytes or \
                a.lower_bound_bytes > a.arena_bytes:
            raise ValueError(f'arena {a.device!r}: inconsistent totals naive={a.naive_bytes} '
                             f'bound={a.lower_bound_bytes} arena={a.arena_bytes}')


def _lower_bound(requests: Sequence[BufferRequest]) -> int:
    """Most aligned bytes alive at any one step: no placement can beat it."""
    if not requests:
        return 0
    delta = np.zeros(max(r.last_use for r in requests) + 2, dtype=np.int64)
    np.add.at(delta, [r.first_use for r in requests], [r.aligned_size for r in requests])
    np.add.at(delta, [r.last_use + 1 for r in requests], [-r.aligned_size for r in requests])
    return int(np.cumsum(delta).max())


def _best_fit(starts: np.ndarray, ends: np.ndarray, size: int, alignment: int) -> int:
    """Offset of the tightest gap that fits among live buffers sorted by start, else the top."""
    best, best_gap, top = None, None, 0
    for start, end in zip(starts.tolist(), ends.tolist()):
        candidate = _align(top, alignment)
        gap = start - candidate
        if gap >= size and (best_gap is None or gap < best_gap):
            best, best_gap = candidate, gap
        top = max(top, end)
    return best if best is not None else _align(top, alignment)


def _plan_arena(device: str, requests: Sequence[BufferRequest]) -> ArenaPlan:
    # Biggest first, longer-lived first among equals, name last so input order never matters.
    order = sorted(requests, key=lambda r: (-r.aligned_size, r.first_use - r.last_use, r.name))
    first = np.array([r.first_use for r in order], dtype=np.int64)
    last = np.array([r.last_use for r in order], dtype=np.int64)
    starts = np.zeros(len(order), dtype=np.int64)
    ends = np.zeros(len(order), dtype=np.int64)
    for i, r in enumerate(order):
        live = np.flatnonzero((first[:i] <= r.last_use) & (last[:i] >= r.first_use))
        live = live[np.argsort(starts[live], kind='stable')]
        starts[i] = _best_fit(starts[live], ends[live], r.aligned_size, r.alignment)
        ends[i] = starts[i] + r.aligned_size
    buffers = sorted((PlacedBuffer(r.name, int(r.size), int(off), int(r.first_use),
                                   int(r.last_use), device)
                      for r, off in zip(order, starts.tolist())),
                     key=lambda b: (b.offset, b.name))
    return ArenaPlan(device, tuple(buffers), naive_bytes=sum(r.aligned_size for r in order),
                     lower_bound_bytes=_lower_bound(order),
                     arena_bytes=int(ends.max()) if len(order) else 0)


def plan_memory(requests: Iterable[BufferRequest]) -> MemoryPlan:
    """Place every request in its device's arena; the same set always gives the same plan."""
    by_device: dict[str, list[BufferRequest]] = {}
    names = set()
    for r in requests:
        if r.name in names:
            raise ValueError(f'buffer {r.name!r} is requested twice')
        names.add(r.name)
        by_device.setdefault(r.device, []).append(r)
    return MemoryPlan(tuple(_plan_arena(dev, reqs) for dev, reqs in sorted(by_device.items())))


def lifetimes_from_schedule(
    schedule: Sequence[tuple[str, Sequence[str], Sequence[str]]],
    sizes: Mapping[str, int],
    devices: Mapping[str, str] | None = None,
    keep_alive: Iterable[str] = (),
) -> list[BufferRequest]:
    """Derive one request per value from (step, inputs, outputs) in execution order.

    Graph inputs are alive from step 0; values nobody reads die where they are born; values
    in keep_alive (graph outputs, recurrent state) must survive the last step, so the runtime
    can hand them out or carry them to the next call. Requests come in first-seen order.
    """
    devices = devices or {}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, (step_name, inputs, outputs) in enumerate(schedule):
        for v in inputs:
            first.setdefault(v, 0)
            last[v] = step
        for v in outputs:
            if v in first:
                raise ValueError(f'value {v!r} is produced by step {step_name!r} but was '
                                 f'already produced or read before it')
            first[v] = step
    for v in keep_alive:
        if v not in first:
            raise ValueError(f'keep_alive value {v!r} does not appear in the schedule')
        last[v] = len(schedule) - 1
    missing = [v for v in first if v not in sizes]
    if missing:
        raise ValueError(f'value {missing[0]!r} has no size (values without size: {missing})')
    return [BufferRequest(v, int(sizes[v]), first[v], last.get(v, first[v]),
                          devices.get(v, 'cpu'))
            for v in first]


def verify_plan(plan: MemoryPlan, alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Raise ValueError if buffers alive at one step share bytes, or an offset is misaligned.

    Independent of the planner on purpose: it checks the plan itself, so a planner bug or a
    hand-edited artifact cannot corrupt activations silently at run time.
    """
    for arena in plan.arenas:
        bufs = sorted(arena.buffers, key=lambda b: (b.offset, b.name))
        for i, a in enumerate(bufs):
            if a.offset % alignment:
                raise ValueError(f'buffer {a.name!r}: offset {a.offset} is not a multiple of '
                                 f'{alignment}')
            if a.offset + a.size > arena.arena_bytes:
                raise ValueError(f'buffer {a.name!r} ends at {a.offset + a.size}, past arena '
                                 f'{arena.device!r} of {arena.arena_bytes} bytes')
            for b in bufs[i + 1:]:
                if b.offset >= a.offset + a.size:
                    break  # sorted by offset: no later buffer can reach back into a
                if a.lives_with(b):
                    raise ValueError(
                        f'buffers {a.name!r} and {b.name!r} overlap in arena {arena.device!r}: '
                        f'bytes [{a.offset}, {a.offset + a.size}) and [{b.offset}, '
                        f'{b.offset + b.size}), steps {a.first_use}..{a.last_use} and '
                        f'{b.first_use}..{b.last_use}')


def render_plan(plan: MemoryPlan, path: str) -> None:
    """Draw each arena as step x address rectangles (PNG or SVG), to see where reuse fails."""
    if os.path.splitext(path)[1].lower() not in ('.png', '.svg'):
        raise ValueError(f'render_plan writes .png or .svg, got {path!r}')
    from matplotlib.figure import Figure  # imported here: only pictures need matplotlib
    from matplotlib.patches import Rectangle

    arenas = plan.arenas or (ArenaPlan('(no buffers)', (), 0, 0, 0),)
    fig = Figure(figsize=(9, 3.5 * len(arenas)))
    for ax, arena in zip(fig.subplots(len(arenas), 1, squeeze=False)[:, 0], arenas):
        for i, b in enumerate(arena.buffers):
            ax.add_patch(Rectangle((b.first_use, b.offset), b.last_use - b.first_use + 1,
                                   b.size, facecolor=f'C{i % 10}', edgecolor='black',
                                   linewidth=0.5, alpha=0.8))
        ax.axhline(arena.lower_bound_bytes, color='gray', linestyle='--', label='lower bound')
        ax.set_xlim(0, max((b.last_use + 1 for b in arena.buffers), default=1))
        ax.set_ylim(0, max(arena.arena_bytes, 1))
        ax.set_xlabel('step')
        ax.set_ylabel('offset (bytes)')
        ax.set_title(f'{arena.device}: arena {arena.arena_bytes} B, bound '
                     f'{arena.lower_bound_bytes} B, naive {arena.naive_bytes} B, '
                     f'efficiency {arena.efficiency:.3f}')
        ax.legend(loc='upper right')
    fig.tight_layout()
    fig.savefig(path)
