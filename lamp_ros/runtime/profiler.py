"""The profiler: rolling latency statistics per tick, inference, group and node, deadline misses,
and a ring of trace events that export to Chrome / Perfetto trace JSON.

Durations come from the host clock around each run; GPU groups also report the device time of
their CUDA graph (CUDA events) under `gpu:<group>`. Everything `profile()` returns is plain
data (numbers, strings, lists), ready for JSON, diagnostics and diffs.
"""

from collections import deque
import os
import threading
import time

import numpy as np


class Profiler:
    def __init__(self, window: int = 1000, max_events: int = 20000):
        self.window = window
        self._samples = {}
        self._counts = {}
        self._events = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.deadline_misses = 0
        self.ticks = 0
        self.t0 = time.perf_counter()

    def record(self, key: str, start: float, seconds: float, cat: str = '') -> None:
        """One duration (seconds) of `key` that began at perf_counter time `start`."""
        with self._lock:
            self._samples.setdefault(key, deque(maxlen=self.window)).append(seconds * 1e3)
            self._counts[key] = self._counts.get(key, 0) + 1
            self._events.append((key, cat or key.split(':')[0], start, seconds,
                                 threading.get_ident()))

    def tick(self, seconds: float, period: float) -> bool:
        """Count a control tick; True if it missed its deadline (took longer than the period)."""
        missed = seconds > period
        with self._lock:
            self.ticks += 1
            self.deadline_misses += int(missed)
        return missed

    def reset(self) -> None:
        with self._lock:
            self._samples.clear()
            self._counts.clear()
            self._events.clear()
            self.deadline_misses = 0
            self.ticks = 0

    def stats(self, key: str) -> dict | None:
        with self._lock:
            samples = np.array(self._samples.get(key, ()), dtype=np.float64)
            count = self._counts.get(key, 0)
        if not samples.size:
            return None
        p50, p90, p99 = np.percentile(samples, [50, 90, 99])
        return {'count': count, 'p50_ms': float(p50), 'p90_ms': float(p90),
                'p99_ms': float(p99), 'max_ms': float(samples.max()),
                'mean_ms': float(samples.mean())}

    def profile(self) -> dict:
        """{'tick', 'inference', 'groups': {...}, 'nodes': {...}, 'gpu': {...}, misses}."""
        with self._lock:
            keys = list(self._samples)
        out = {'tick': self.stats('tick'), 'inference': self.stats('inference'),
               'groups': {}, 'nodes': {}, 'gpu': {}, 'ticks': self.ticks,
               'deadline_misses': self.deadline_misses, 'window': self.window}
        for key in keys:
            kind, _, name = key.partition(':')
            if kind in ('group', 'node', 'gpu'):
                out[{'group': 'groups', 'node': 'nodes', 'gpu': 'gpu'}[kind]][name] = \
                    self.stats(key)
        return out

    def chrome_trace(self) -> dict:
        """Chrome trace event format ('X' complete events, microseconds), one row per thread."""
        with self._lock:
            events = list(self._events)
        pid = os.getpid()
        threads = {tid: i for i, tid in enumerate(dict.fromkeys(e[4] for e in events))}
        trace = [{'name': name, 'cat': cat, 'ph': 'X', 'pid': pid, 'tid': threads[tid],
                  'ts': (start - self.t0) * 1e6, 'dur': seconds * 1e6}
                 for name, cat, start, seconds, tid in events]
        trace += [{'name': 'thread_name', 'ph': 'M', 'pid': pid, 'tid': i,
                   'args': {'name': 'control' if i == 0 else f'worker-{i}'}}
                  for i in threads.values()]
        return {'traceEvents': trace, 'displayTimeUnit': 'ms'}
