"""Asynchronous inference on a recording's schedule: replay's stand-in for the worker thread.

On the robot an asynchronous chunk is merged at the first tick after its inference finished,
which depends on the machine's speed that day. The node records, per inference, the tick it
started at, the tick its chunk was merged at and how long it took (node/records.py). This
worker, in the Runtime's place of the thread (Runtime.load(worker_factory=...)), runs each
inference at once in the calling thread and hands its chunk over at the recorded tick, with the
recorded duration, so the chunker merges at the same tick and real-time chunking predicts the
same delay from the same latency samples. The replay sets `now` before every tick.

An inference the recording does not have (another artifact replans at other ticks) is merged
at the next tick and counted in `unscheduled`; one the recording has and the replay does not
start is counted in `not_started`. Either means the replay has left the recorded schedule.
"""

from lamp_ros.runtime.worker import InferenceResult


class RecordedSchedule:
    def __init__(self, infer, inferences: dict):
        """`inferences`: tick time an inference started at -> its inference row."""
        self._infer = infer
        self._by_start = dict(inferences)
        self.now = None
        self._pending = None     # (InferenceResult, tick it is merged at or None: the next)
        self._started_at = None
        self.unscheduled = 0
        self.not_started = 0
        self.failed_as_recorded = 0

    @property
    def busy(self) -> bool:
        if self._pending is None:
            return False
        _, merge_at = self._pending
        return self.now < merge_at if merge_at is not None else self.now <= self._started_at

    def submit(self, feeds: dict, t_obs: float, index: int = 0) -> bool:
        if self.busy:
            return False
        row = self._by_start.pop(self.now, None)
        if row is not None and row['failed']:
            # it raised on the robot: deliver the failure as it came, nothing is computed
            self.failed_as_recorded += 1
            result = InferenceResult(None, t_obs, 'failed in the recording', row['seconds'],
                                     index)
        else:
            chunk, seconds = self._infer(feeds)
            result = InferenceResult(chunk, t_obs, None,
                                     row['seconds'] if row is not None else seconds, index)
        if row is None:
            self.unscheduled += 1
        self._pending = (result, row['merged_tick_s'] if row is not None else None)
        self._started_at = self.now
        return True

    def poll(self) -> InferenceResult | None:
        if self._pending is None or self.busy:
            return None
        result, _ = self._pending
        self._pending = None
        return result

    def skip_before(self, now: float, count: bool = True) -> None:
        """Drop the recorded inferences that started before `now` (counted as `not_started`
        unless the replay begins after them)."""
        late = [t for t in self._by_start if t < now]
        self.not_started += len(late) if count else 0
        for t in late:
            del self._by_start[t]

    def discard(self) -> None:
        self._pending = None

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True

    def close(self) -> None:
        self._pending = None
