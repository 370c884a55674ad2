"""How many control periods a chunk will be late: real-time chunking's delay d, from measured
inference latency.

With `merge_mode: rtc` the denoise stage takes the actions the robot executes while the chunk
is computed. In a synchronous tick that is known (the observation's age); an asynchronous
inference is merged on the first tick after it finishes, so the delay has to be predicted when
it starts: d = ceil((observation age + expected latency) / period). The expected latency is a
high percentile of a sliding window of measured inferences, leaving out the first calls (cold
caches, lazy initialisation, CUDA graph capture), which take many times a warm call. Too large
a d only re-generates actions the plan already had; too small a d lets the new chunk ignore
actions that were in fact executed, so the estimate leans high.
"""

from collections import deque
import math

import numpy as np


class LatencyWindow:
    """The last `size` warm inference latencies (seconds); `expected()` a high percentile."""

    def __init__(self, size: int = 20, cold_calls: int = 2, percentile: float = 90.0):
        self.samples = deque(maxlen=size)
        self.cold_calls = cold_calls
        self.percentile = percentile
        self.seen = 0

    def record(self, seconds: float) -> None:
        self.seen += 1
        if self.seen > self.cold_calls:
            self.samples.append(float(seconds))

    def expected(self) -> float:
        """Seconds an inference is expected to take: 0 before any warm call."""
        if not self.samples:
            return 0.0
        return float(np.percentile(np.asarray(self.samples), self.percentile))


def arrival_time(t: float, t_obs: float, latency: float, period: float) -> float:
    """The tick time a chunk started at tick t from an observation stamped t_obs is expected
    to be merged at: t_obs + d * period with d = ceil((t - t_obs + latency) / period)."""
    ticks = math.ceil((t - t_obs + latency) / period - 1e-9)
    return t_obs + max(ticks, 0) * period
