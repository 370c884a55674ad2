"""The inference worker: runs the inference phase in its own thread so ticks never wait.

One job at a time (a robot wants the freshest chunk, not a queue of stale ones): `submit`
refuses while a job runs; the finished chunk waits in a one-slot mailbox until the control
thread `poll`s it. Errors are delivered the same way, never raised in the worker.
"""

from dataclasses import dataclass
import threading


@dataclass(frozen=True)
class InferenceResult:
    chunk: object          # the chunk (a copy), or None on error
    t_obs: float           # observation time the chunk belongs to
    error: str | None
    seconds: float
    index: int = 0         # which inference of the episode (0, 1, ...): what it was submitted as


class InferenceWorker:
    def __init__(self, infer):
        """infer(feeds) -> (chunk, seconds); runs on the worker thread."""
        self._infer = infer
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._job = None
        self._result = None
        self._busy = False
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name='lamp-inference', daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._busy

    def submit(self, feeds: dict, t_obs: float, index: int = 0) -> bool:
        """Start inference `index` of the episode on a snapshot of the inputs; False if one is
        running."""
        with self._lock:
            if self._busy or self._stop:
                return False
            self._busy = True
            self._job = (feeds, t_obs, index)
            self._wake.notify()
            return True

    def poll(self) -> InferenceResult | None:
        """The finished result, once; None while running or idle."""
        with self._lock:
            result, self._result = self._result, None
            return result

    def discard(self) -> None:
        """Forget a finished result (e.g. on reset: it belongs to the previous episode)."""
        with self._lock:
            self._result = None

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._wake.wait_for(lambda: not self._busy, timeout)

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(lambda: self._job is not None or self._stop)
                if self._stop:
                    return
                feeds, t_obs, index = self._job
                self._job = None
            try:
                chunk, seconds = self._infer(feeds)
                result = InferenceResult(chunk, t_obs, None, seconds, index)
            except Exception as exc:  # delivered to the control thread, which reports it
                result = InferenceResult(None, t_obs, f'{type(exc).__name__}: {exc}', 0.0, index)
            with self._lock:
                self._result = result
                self._busy = False
                self._wake.notify_all()
