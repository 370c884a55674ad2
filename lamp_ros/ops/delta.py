"""Actions relative to the state: a policy trained on deltas, driving a robot that takes absolute
positions (openpi's DeltaActions / AbsoluteActions convention, LeRobot's relative actions).

For each joint the mask marks, the state at observation time is added to every action of the
chunk; the others pass as they are. The state is the one the chunk was computed from, so a chunk
that arrives late still means what the policy meant.
"""

import numpy as np


def check_mask(mask, joints: int) -> np.ndarray:
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 1 or mask.shape[0] != joints:
        raise ValueError(f'delta mask: {mask.shape} for {joints} joints')
    return mask


def delta_to_absolute(chunk, state, mask) -> np.ndarray:
    """(horizon, joints) deltas + (joints,) state where `mask` -> absolute positions."""
    chunk = np.asarray(chunk, dtype=np.float32)
    state = np.asarray(state, dtype=np.float32)
    if chunk.ndim != 2 or state.shape != (chunk.shape[1],):
        raise ValueError(f'delta_to_absolute: chunk {chunk.shape} and state {state.shape} do '
                         'not match')
    mask = check_mask(mask, chunk.shape[1])
    return (chunk + np.where(mask, state, np.float32(0))[None, :]).astype(np.float32)
