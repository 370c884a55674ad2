"""Feature statistics as LeRobot 0.6.1 computes them (lerobot/datasets/compute_stats.py).

LeRobot normalises a policy's inputs and outputs with meta/stats.json, and keeps each episode's
own statistics in the episodes parquet; a dataset whose numbers came from another formula would
train differently from one LeRobot wrote itself. So this is the same arithmetic, in numpy (no
torch, no LeRobot install): min/max/mean/std per dimension, quantiles from a 5000-bin histogram,
images per channel over a sample of the episode's frames (scaled to [0, 1]), and the dataset's
statistics merged episode by episode in the order LeRobot merges them.
"""

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f'q{int(q * 100):02d}' for q in QUANTILES)
BINS = 5000


class _RunningQuantileStats:
    """LeRobot's RunningQuantileStats for the single batch an episode is (its update() on a
    fresh object): the operations and their dtypes are kept, so the numbers are the same."""

    def __init__(self, batch: np.ndarray):
        batch = batch.reshape(-1, batch.shape[-1])
        batch = batch.astype(np.result_type(batch.dtype, np.float32), copy=False)
        count = batch.shape[0]
        self.mean = np.mean(batch, axis=0)
        self.mean_of_squares = np.mean(batch**2, axis=0)
        self.min = np.min(batch, axis=0)
        self.max = np.max(batch, axis=0)
        self.edges = [np.linspace(self.min[i] - 1e-10, self.max[i] + 1e-10, BINS + 1)
                      for i in range(batch.shape[1])]
        self.count = count
        self.mean += (np.mean(batch, axis=0) - self.mean) * (count / self.count)
        self.mean_of_squares += (np.mean(batch**2, axis=0) - self.mean_of_squares) * (
            count / self.count)
        self.histograms = [np.histogram(batch[:, i], bins=self.edges[i])[0].astype(np.float64)
                           for i in range(batch.shape[1])]

    def statistics(self) -> dict:
        variance = self.mean_of_squares - self.mean**2
        out = {'min': self.min.copy(), 'max': self.max.copy(), 'mean': self.mean.copy(),
               'std': np.sqrt(np.maximum(0, variance)), 'count': np.array([self.count])}
        for q, key in zip(QUANTILES, QUANTILE_KEYS):
            out[key] = np.array([_quantile(h, e, q * self.count)
                                 for h, e in zip(self.histograms, self.edges)])
        return out


def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    cumsum = np.cumsum(hist)
    idx = np.searchsorted(cumsum, target)
    if idx == 0:
        return edges[0]
    if idx >= len(cumsum):
        return edges[-1]
    before = cumsum[idx - 1]
    in_bin = cumsum[idx] - before
    if in_bin == 0:
        return edges[idx]
    return edges[idx] + (target - before) / in_bin * (edges[idx + 1] - edges[idx])


def _basic(rows: np.ndarray, count: int) -> dict:
    out = {'min': np.min(rows, axis=0), 'max': np.max(rows, axis=0),
           'mean': np.mean(rows, axis=0), 'std': np.std(rows, axis=0),
           'count': np.array([count])}
    for key in QUANTILE_KEYS:
        out[key] = out['mean'].copy()
    return out


def _stats(rows: np.ndarray, count: int) -> dict:
    if rows.shape[0] < 2:
        return _basic(rows, count)
    out = _RunningQuantileStats(rows).statistics()
    out['count'] = np.array([count])
    return out


def vector_stats(values: np.ndarray) -> dict:
    """Per-dimension statistics of an episode's (N, D) vectors, or of (N,) scalars (then
    every statistic has shape (1,), as LeRobot keeps them)."""
    values = np.asarray(values)
    if values.ndim == 1:
        out = _stats(values.reshape(-1, 1), values.shape[0])
        return {k: v if k == 'count' else v.reshape(1) for k, v in out.items()}
    return _stats(values, values.shape[0])


def sample_indices(length: int) -> list:
    """Which of an episode's frames its image statistics are computed over (LeRobot's
    estimate_num_samples: all of them up to 100, then length**0.75, at most 10000)."""
    samples = max(min(100, length), min(int(length**0.75), 10_000))
    return np.round(np.linspace(0, length - 1, samples)).astype(int).tolist()


def _downsample(chw: np.ndarray) -> np.ndarray:
    _, height, width = chw.shape
    if max(width, height) < 300:
        return chw
    factor = int(width / 150) if width > height else int(height / 150)
    return chw[:, ::factor, ::factor]


def image_stats(images) -> dict:
    """Per-channel statistics, shape (3, 1, 1), in [0, 1], of the sampled (H, W, 3) uint8
    frames (in sample_indices order; large frames are strided down as LeRobot does)."""
    chw = np.stack([_downsample(np.transpose(img, (2, 0, 1))) for img in images])
    n, channels = chw.shape[:2]
    out = _stats(chw.transpose(0, 2, 3, 1).reshape(-1, channels), n)
    return {k: v if k == 'count' else np.squeeze(v.reshape(1, -1, 1, 1) / 255.0, axis=0)
            for k, v in out.items()}


def _merge_feature(stats: list) -> dict:
    means = np.stack([s['mean'] for s in stats])
    variances = np.stack([s['std'] ** 2 for s in stats])
    counts = np.stack([s['count'] for s in stats])
    total = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / total
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / total
    out = {'min': np.min(np.stack([s['min'] for s in stats]), axis=0),
           'max': np.max(np.stack([s['max'] for s in stats]), axis=0),
           'mean': mean, 'std': np.sqrt(variance), 'count': total}
    for key in QUANTILE_KEYS:
        out[key] = (np.stack([s[key] for s in stats]) * counts).sum(axis=0) / total
    return out


def merge(dataset_stats: dict | None, episode_stats: dict) -> dict:
    """The dataset's statistics after one more episode (LeRobot merges each saved episode into
    the running total: aggregate_stats([total, episode]))."""
    if dataset_stats is None:
        return episode_stats
    return {key: _merge_feature([dataset_stats[key], episode_stats[key]])
            for key in episode_stats}


def to_json(stats: dict) -> dict:
    """Arrays as (nested) lists, for stats.json and the episodes parquet."""
    return {key: {name: np.asarray(v).tolist() for name, v in ft.items()}
            for key, ft in stats.items()}
