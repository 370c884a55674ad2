"""Turn a policy's action chunks into one action per control tick.

A VLA policy predicts H future actions from one observation, but inference takes several
control ticks, and the arm must move meanwhile. The chunker therefore keeps a plan on a time
axis: a chunk computed from an observation taken at `t_obs` schedules action i for
`t_obs + i*dt`. When a chunk arrives at `t_now`, the steps whose time has passed during
inference are dropped (latency compensation) and the rest is merged with what remains of the
previous plan. Jerks at chunk hand-over are the most common complaint with chunked policies,
so the merge is selectable:

- 'latest': the new chunk replaces the old plan (openpi, LeRobot's queue).
- 'temporal_ensemble': ACT's weighted mean of every chunk that predicted a step, with weight
  exp(-m*i) and i = 0 for the oldest prediction. The plan is kept as a weighted sum, a weight
  sum and a count per step, so each new chunk adds one term and the mean stays exact for any
  number of overlapping chunks.
- 'crossfade': a linear blend from old to new over the first few overlapping steps.

State (plain arrays, see `init_state`): `plan_sum` (H, J) float64, `plan_wsum` (H,) float64,
`plan_count` (H,) int64, `t0` (1,) float64 (time of plan step 0), `valid` (1,) bool. Planned
steps are the prefix with `plan_count > 0`.
"""

from dataclasses import asdict, dataclass, fields

import numpy as np

from lamp_ros.ops.rtc_config import RtcConfig
from lamp_ros.ops.state import (
    check_finite_float, check_keys, check_positive_int, check_state)

MERGE_MODES = ('latest', 'temporal_ensemble', 'crossfade', 'rtc')
# rtc (real-time chunking): the policy generates the new chunk around the actions committed
# while it computed (`committed`), so the chunk replaces the plan as it is, like `latest`.
# what a command line names: a merge mode, or rtc with its mode (rtc_config.py)
MERGE_CHOICES = MERGE_MODES + ('rtc/trained', 'rtc/guided')
WHERE = 'chunker'


def padded_actions(rows, horizon: int) -> np.ndarray:
    """(horizon, J) float32: `rows` (n <= horizon, J) first, zeros after; the fixed shape of
    real-time chunking's committed actions whatever their number."""
    rows = np.asarray(rows, np.float32)
    out = np.zeros((horizon, rows.shape[-1]), np.float32)
    out[:len(rows)] = rows
    return out


def merge_settings(choice: str, chunker: dict | None = None) -> dict:
    """A chunker's settings (a spec's `control.chunker`, default none) with its merge set by
    `choice` (MERGE_CHOICES): 'rtc/guided' sets merge_mode rtc and its mode; any mode but
    rtc drops the rtc settings."""
    if choice not in MERGE_CHOICES:
        raise ValueError(f'{WHERE}: merge {choice!r} is unknown; known: {MERGE_CHOICES}')
    out = dict(chunker or {})
    mode, _, rtc_mode = choice.partition('/')
    out['merge_mode'] = mode
    if mode != 'rtc':
        out.pop('rtc', None)
    elif rtc_mode:
        out['rtc'] = {**(out.get('rtc') or {}), 'mode': rtc_mode}
    return out


@dataclass(frozen=True)
class ActionChunker:
    """Parameters of chunk scheduling; all state lives in the dict from `init_state`.

    `merge_mode` is the parameter the design calls `merge`: a dataclass field cannot share
    its name with the `merge` method.
    """

    horizon: int  # H, actions per chunk (50 for pi0.5)
    joints: int  # J, action dimensions
    dt: float  # control period in seconds (1/22 on the reference arm)
    replan_at: int = 25  # request a chunk when fewer than this many planned actions remain
    merge_mode: str = 'temporal_ensemble'
    ensemble_m: float = 0.01  # ACT's m; larger trusts older predictions more
    crossfade_steps: int = 8
    rtc: dict | None = None  # merge_mode rtc's settings (rtc_config.py), defaults filled in

    def __post_init__(self):
        for name in ('horizon', 'joints', 'replan_at', 'crossfade_steps'):
            check_positive_int(getattr(self, name), name, WHERE)
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ('dt', 'ensemble_m'):
            object.__setattr__(self, name, check_finite_float(getattr(self, name), name, WHERE))
        if self.dt <= 0:
            raise ValueError(f'{WHERE}: dt must be > 0 seconds, got {self.dt}')
        if self.replan_at > self.horizon:
            raise ValueError(
                f'{WHERE}: replan_at={self.replan_at} must be <= horizon={self.horizon}')
        if self.merge_mode not in MERGE_MODES:
            raise ValueError(
                f'{WHERE}: merge_mode {self.merge_mode!r} is unknown; known: {MERGE_MODES}')
        if self.merge_mode == 'rtc':
            object.__setattr__(self, 'rtc', RtcConfig.from_dict(self.rtc).to_dict())
        elif self.rtc is not None:
            raise ValueError(f'{WHERE}: rtc settings are only read with merge_mode rtc, not '
                             f'{self.merge_mode!r}')
        # exp(-m*n) with n up to about H chunks per step must stay a finite, non-zero weight.
        if abs(self.ensemble_m) * self.horizon > 100:
            raise ValueError(
                f'{WHERE}: ensemble_m={self.ensemble_m} is too large for horizon '
                f'{self.horizon} (|ensemble_m| * horizon must be <= 100)')

    def to_dict(self) -> dict:
        """Return JSON-ready parameters that `from_dict` reads back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d) -> 'ActionChunker':
        """Build from a dict of parameters; unknown or missing keys are named in the error."""
        check_keys(d, [f.name for f in fields(cls)], WHERE,
                   required=('horizon', 'joints', 'dt'))
        return cls(**d)

    def init_state(self) -> dict:
        """Return the empty state: no plan, so the first tick asks for a chunk."""
        return {
            'plan_sum': np.zeros((self.horizon, self.joints), dtype=np.float64),
            'plan_wsum': np.zeros(self.horizon, dtype=np.float64),
            'plan_count': np.zeros(self.horizon, dtype=np.int64),
            't0': np.zeros(1, dtype=np.float64),
            'valid': np.zeros(1, dtype=bool),
        }

    def needs_chunk(self, state: dict, t: float) -> bool:
        """Say whether to start an inference now.

        True without a plan, or when fewer than `replan_at` planned actions remain at t, so a
        new chunk can arrive before the plan runs out.
        """
        check_state(state, self.init_state(), WHERE)
        if not state['valid'][0]:
            return True
        return self._remaining(state, self._index(state, t)) < self.replan_at

    def merge(self, state: dict, chunk, t_obs: float, t_now: float) -> dict:
        """Return the state with `chunk` (H, J), observed at t_obs and arrived at t_now, merged.

        The new plan starts at the first step of the chunk that has not elapsed and ends with
        the chunk; where the old plan has predictions for the same times they are combined
        according to `merge_mode`. The input state is not modified.
        """
        check_state(state, self.init_state(), WHERE)
        chunk = self._check_chunk(chunk)
        t_obs = check_finite_float(t_obs, 't_obs', WHERE)
        t_now = check_finite_float(t_now, 't_now', WHERE)
        elapsed = int(round((t_now - t_obs) / self.dt))
        if elapsed < 0:
            raise ValueError(f'{WHERE}: t_now={t_now} is before t_obs={t_obs}')
        if elapsed >= self.horizon:
            raise ValueError(
                f'{WHERE}: chunk is stale: {elapsed} steps elapsed since t_obs, '
                f'horizon is {self.horizon}')
        new = chunk[elapsed:]
        n_new = new.shape[0]
        t0 = t_obs + elapsed * self.dt
        out = self.init_state()
        out['plan_sum'][:n_new] = new
        out['plan_wsum'][:n_new] = 1.0
        out['plan_count'][:n_new] = 1
        out['t0'][0] = t0
        out['valid'][0] = True
        if state['valid'][0]:
            shift = int(round((t0 - state['t0'][0]) / self.dt))
            lo = max(0, -shift)
            hi = min(n_new, self._planned(state) - shift)
            if hi > lo:
                self._combine(state, out, new, lo, hi, shift)
        return out

    def action_at(self, state: dict, t: float):
        """Return (action (J,), info) for time t.

        info: `index` (plan index of t, clamped at 0), `remaining` (planned actions from t on)
        and `underrun` (True when t is past the plan; the last planned action is held).
        """
        check_state(state, self.init_state(), WHERE)
        if not state['valid'][0]:
            raise ValueError(f'{WHERE}: no plan yet; merge a chunk before asking for actions')
        index = self._index(state, t)
        planned = self._planned(state)
        underrun = index >= planned
        k = planned - 1 if underrun else index
        action = state['plan_sum'][k] / state['plan_wsum'][k]
        info = {
            'index': index,
            'remaining': self._remaining(state, index),
            'underrun': bool(underrun),
        }
        return action.astype(np.float64), info

    def committed(self, state: dict, t_obs: float, t_now: float) -> np.ndarray:
        """(d, J): the planned actions for t_obs, t_obs + dt, ... up to before t_now, those
        the robot executes while a chunk observed at t_obs is computed (real-time chunking
        conditions the new chunk on them). Fewer rows where the plan does not cover them (none
        without a plan)."""
        check_state(state, self.init_state(), WHERE)
        d = int(round((check_finite_float(t_now, 't_now', WHERE)
                       - check_finite_float(t_obs, 't_obs', WHERE)) / self.dt))
        if not state['valid'][0] or d <= 0:
            return np.zeros((0, self.joints), dtype=np.float64)
        start = int(round((t_obs - state['t0'][0]) / self.dt))
        if start < 0:
            return np.zeros((0, self.joints), dtype=np.float64)
        return self.plan(state)[start:start + min(d, self.horizon)]

    def rtc_inputs(self, state: dict, t_obs: float, t_now: float) -> tuple:
        """Real-time chunking's inputs in a fixed shape, for a chunk observed at t_obs and
        merged at t_now: (previous (H, J) float32: the plan's actions for t_obs, t_obs + dt,
        ... (zeros past its end); delay: how many of them the robot executes before t_now
        (`committed`'s rows); end: how far the guided mode pulls toward them, the plan's end
        or, with rtc.execution_horizon s, at most H - s)."""
        check_state(state, self.init_state(), WHERE)
        start = int(round((check_finite_float(t_obs, 't_obs', WHERE) - state['t0'][0])
                          / self.dt))
        if not state['valid'][0] or start < 0:
            return (padded_actions(np.zeros((0, self.joints)), self.horizon), np.int64(0),
                    np.int64(0))
        rows = self.plan(state)[start:start + self.horizon]
        previous = padded_actions(rows, self.horizon)
        delay = len(self.committed(state, t_obs, t_now))
        end = len(rows)
        horizon = (self.rtc or {}).get('execution_horizon')
        if horizon is not None:
            end = max(min(end, self.horizon - horizon), delay)
        return previous, np.int64(delay), np.int64(end)

    def plan(self, state: dict) -> np.ndarray:
        """Return the merged plan (n, J), step 0 at `state['t0']`; (0, J) without a plan."""
        check_state(state, self.init_state(), WHERE)
        if not state['valid'][0]:
            return np.zeros((0, self.joints), dtype=np.float64)
        n = self._planned(state)
        return state['plan_sum'][:n] / state['plan_wsum'][:n, None]

    def _check_chunk(self, chunk) -> np.ndarray:
        try:
            arr = np.array(chunk, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f'{WHERE}: chunk must be numbers: {e}') from e
        if arr.shape != (self.horizon, self.joints):
            raise ValueError(
                f'{WHERE}: chunk must have shape ({self.horizon}, {self.joints}), '
                f'got {arr.shape}')
        bad = np.argwhere(~np.isfinite(arr))
        if bad.size:
            step, joint = (int(v) for v in bad[0])
            raise ValueError(f'{WHERE}: chunk[{step}, {joint}] is {arr[step, joint]}')
        return arr

    def _index(self, state: dict, t: float) -> int:
        t = check_finite_float(t, 't', WHERE)
        return max(0, int(round((t - state['t0'][0]) / self.dt)))

    @staticmethod
    def _planned(state: dict) -> int:
        return int(np.count_nonzero(state['plan_count']))

    def _remaining(self, state: dict, index: int) -> int:
        return max(0, self._planned(state) - index)

    def _combine(self, old: dict, out: dict, new: np.ndarray, lo: int, hi: int, shift: int):
        """Combine new steps [lo, hi) with old steps [lo + shift, hi + shift) into `out`."""
        old_idx = np.arange(lo, hi) + shift
        old_count = old['plan_count'][old_idx]
        out['plan_count'][lo:hi] = old_count + 1
        if self.merge_mode == 'temporal_ensemble':
            # The step already has old_count predictions, so this one is i = old_count.
            weight = np.exp(-self.ensemble_m * old_count.astype(np.float64))
            out['plan_sum'][lo:hi] = old['plan_sum'][old_idx] + weight[:, None] * new[lo:hi]
            out['plan_wsum'][lo:hi] = old['plan_wsum'][old_idx] + weight
        elif self.merge_mode == 'crossfade':
            steps = min(self.crossfade_steps, hi - lo)
            idx = old_idx[:steps]
            previous = old['plan_sum'][idx] / old['plan_wsum'][idx, None]
            a = (np.arange(steps, dtype=np.float64) + 1.0) / (steps + 1.0)
            blended = (1.0 - a[:, None]) * previous + a[:, None] * new[lo:lo + steps]
            out['plan_sum'][lo:lo + steps] = blended
        # 'latest' and 'rtc': out already holds the new chunk alone.
