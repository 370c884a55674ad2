"""The letterbox as tables: what lets a compiled artifact resize the cameras on its GPU.

`resize_with_pad` (ops/image.py) resizes on the host with OpenCV. With `linear_exact`
interpolation (OpenCV's INTER_LINEAR_EXACT) each output byte is a fixed function of four
source bytes and two 8-bit weights per axis:

    out = ((s00 * (256 - wx) + s01 * wx) * (256 - wy) + (s10 * (256 - wx) + s11 * wx) * wy
           + 2**15) >> 16

where, for an output column j of a resize from w to new_w columns, f = (j + 0.5) * (w / new_w)
- 0.5 in double precision, the taps are floor(f) and floor(f) + 1 clamped to the image, and
wx = round-half-even((f - floor(f)) * 256) (rows alike). So the host only works out, per output
row and column, two byte offsets, a weight and whether it lies on the image or the black
padding: `letterbox_geometry`, a few KB per camera, cached per frame size. A device kernel
(`lamp::letterbox`, kernels/operators/) then makes the (size, size, 3) pixels from the frame's
bytes as they came, in integer arithmetic, the same bytes as the host resize
(test/ops/test_letterbox.py checks both against OpenCV). The host copies each frame once, into
the pinned buffer the GPU reads, instead of resizing it (bench/host_pixels.py times both).
"""

from functools import lru_cache

import numpy as np

from lamp_ros.ops.image import check_image, letterbox_box, resize_with_pad

WEIGHT_BITS = 8          # OpenCV's INTER_LINEAR_EXACT keeps 8 fractional bits for uint8
ONE = 1 << WEIGHT_BITS
# per table entry: byte offset of the first tap, of the second, the second's weight, on-image
FIELDS = ('offset0', 'offset1', 'weight1', 'valid')


def axis_taps(src: int, dst: int) -> tuple:
    """(first tap, second tap, second tap's weight) of each of `dst` outputs resampled from
    `src` inputs, as INTER_LINEAR_EXACT computes them (int64 arrays)."""
    scale = 1.0 / (dst / src)  # OpenCV: inverse scale dst / src, then its inverse (double)
    f = scale * (np.arange(dst, dtype=np.float64) + 0.5) - 0.5
    first = np.floor(f).astype(np.int64)
    weight = np.rint((f - first) * ONE).astype(np.int64)  # round half to even, as cvRound64
    return np.clip(first, 0, src - 1), np.clip(first + 1, 0, src - 1), weight


def _axis_table(src: int, dst: int, size: int, start: int, step: int) -> np.ndarray:
    """(size, 4) int32: the letterbox's `size` outputs along one axis, `dst` of them on the
    image from output `start` on; offsets in bytes (`step` bytes per source index)."""
    table = np.zeros((size, len(FIELDS)), np.int64)
    first, second, weight = axis_taps(src, dst)
    table[start:start + dst] = np.stack(
        [first * step, second * step, weight, np.ones_like(weight)], axis=1)
    return table.astype(np.int32)


@lru_cache(maxsize=64)
def letterbox_geometry(height: int, width: int, size: int) -> np.ndarray:
    """(2, size, 4) int32 tables for a (height, width, 3) frame into (size, size, 3): [0] the
    output rows, [1] the output columns (FIELDS each). Read-only (it is cached)."""
    if height < 1 or width < 1 or size < 1:
        raise ValueError(f'letterbox_geometry: sizes must be >= 1, got {height}x{width} -> '
                         f'{size}')
    if height * width * 3 >= 2 ** 31:
        raise ValueError(f'letterbox_geometry: a {height}x{width} frame is past int32 offsets')
    new_h, new_w, top, left = letterbox_box(height, width, size, size)
    tables = np.stack([_axis_table(height, new_h, size, top, width * 3),
                       _axis_table(width, new_w, size, left, 3)])
    tables.setflags(write=False)
    return tables


def letterbox_reference(frame: np.ndarray, geometry: np.ndarray) -> np.ndarray:
    """The device kernel's definition in numpy: a frame's bytes (flat; only those the tables
    name are read) and its (2, size, 4) tables -> (size, size, 3) uint8."""
    flat = np.asarray(frame).reshape(-1).astype(np.int64)
    rows, cols = geometry[0].astype(np.int64), geometry[1].astype(np.int64)
    channel = np.arange(3)
    r0, r1, wy = rows[:, 0, None, None], rows[:, 1, None, None], rows[:, 2, None, None]
    c0, c1, wx = (cols[None, :, 0, None] + channel, cols[None, :, 1, None] + channel,
                  cols[None, :, 2, None])
    top = flat[r0 + c0] * (ONE - wx) + flat[r0 + c1] * wx
    bottom = flat[r1 + c0] * (ONE - wx) + flat[r1 + c1] * wx
    value = (top * (ONE - wy) + bottom * wy + (1 << (2 * WEIGHT_BITS - 1))) >> (2 * WEIGHT_BITS)
    on_image = (rows[:, 3, None, None] * cols[None, :, 3, None]) != 0
    return np.where(on_image, value, 0).astype(np.uint8)


def letterbox_frames(images: dict, slots, size: int, capacity: dict) -> tuple:
    """The host side of the device letterbox, for every camera slot in order.

    images: {slot: (H, W, 3) uint8} for the cameras present; capacity: {slot: the bytes of the
    device buffer its frames are copied into}. Returns (*frames, geometry, image_mask):
    frames[i] is the slot's image as flat bytes (a view, not a copy, when it is contiguous) or
    None when the camera is absent; a frame larger than its slot's buffer is letterboxed here,
    on the host (`resize_with_pad`, linear_exact: the same bytes), and handed on as a (size,
    size) frame. geometry (1, cams, 2, size, 4) int32: each slot's tables, zeros (all black)
    for an absent camera, whose image_mask (1, cams) entry is False as in `stack_cameras`.
    """
    unknown = sorted(set(images) - set(slots))
    if unknown:
        raise ValueError(f'images: unknown camera slots {unknown}; known: {list(slots)}')
    frames, geometry = [], np.zeros((1, len(slots), 2, size, len(FIELDS)), np.int32)
    for i, slot in enumerate(slots):
        image = images.get(slot)
        if image is None:
            frames.append(None)
            continue
        try:
            check_image(image)
        except ValueError as exc:
            raise ValueError(f'images[{slot!r}]: {exc}') from None
        if image.nbytes > capacity[slot]:
            image = resize_with_pad(image, size, size, 'linear_exact')
        geometry[0, i] = letterbox_geometry(image.shape[0], image.shape[1], size)
        frames.append(np.ascontiguousarray(image).reshape(-1))
    mask = np.array([[images.get(s) is not None for s in slots]])
    return (*frames, geometry, mask)
