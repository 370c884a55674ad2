"""Camera image preprocessing: openpi's aspect-preserving resize with black padding.

The model was trained on images letterboxed this way, so stretching instead of padding
would shift what the vision encoder sees. The host stops at uint8: the mapping to the model's
[-1, 1] range is the vision encoder's first operation (policies/pi05/siglip.py `to_model_range`),
so a compiled artifact does it on its device: the host converts nothing and copies one byte per
channel (bench/host_pixels.py).
"""

import cv2
import numpy as np

INTERPOLATIONS = {
    'linear': cv2.INTER_LINEAR,
    # OpenCV's bit-exact bilinear (8-bit fixed-point weights, the same bytes on every CPU):
    # the one a compiled artifact can also run on its GPU (ops/letterbox.py)
    'linear_exact': cv2.INTER_LINEAR_EXACT,
    'area': cv2.INTER_AREA,
    'nearest': cv2.INTER_NEAREST,
    'cubic': cv2.INTER_CUBIC,
}


def check_image(image: np.ndarray) -> None:
    if not isinstance(image, np.ndarray):
        raise ValueError(f'image must be a numpy array, got {type(image).__name__}')
    if image.dtype != np.uint8:
        raise ValueError(f'image must be uint8, got {image.dtype}')
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f'image must be HxWx3, got shape {image.shape}')
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f'image is empty, shape {image.shape}')


def letterbox_box(cur_h: int, cur_w: int, height: int, width: int) -> tuple:
    """Where a cur_h x cur_w image lands in a height x width letterbox: (new_h, new_w, top,
    left). The one definition the host resize and the device letterbox's tables share."""
    scale = min(height / cur_h, width / cur_w)
    new_h = min(height, max(1, int(round(cur_h * scale))))
    new_w = min(width, max(1, int(round(cur_w * scale))))
    return new_h, new_w, (height - new_h) // 2, (width - new_w) // 2


def resize_with_pad(
    image: np.ndarray, height: int, width: int, interpolation: str = 'linear'
) -> np.ndarray:
    """Resize an HxWx3 uint8 image into (height, width, 3), keeping aspect, padding black."""
    check_image(image)
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f'interpolation {interpolation!r} is unknown; known: {sorted(INTERPOLATIONS)}')
    if height < 1 or width < 1:
        raise ValueError(f'height and width must be >= 1, got {height}x{width}')
    cur_h, cur_w = image.shape[:2]
    if (cur_h, cur_w) == (height, width):
        return image.copy()
    new_h, new_w, top, left = letterbox_box(cur_h, cur_w, height, width)
    resized = cv2.resize(image, (new_w, new_h), interpolation=INTERPOLATIONS[interpolation])
    out = np.zeros((height, width, 3), dtype=np.uint8)
    out[top:top + new_h, left:left + new_w] = resized
    return out


def preprocess_image(image: np.ndarray, size: int, interpolation: str = 'linear') -> np.ndarray:
    """(H, W, 3) uint8 of any size -> (size, size, 3) uint8, aspect kept."""
    return resize_with_pad(image, size, size, interpolation)


def stack_cameras(images: dict, slots, size: int):
    """{slot: (S, S, 3) uint8} for the cameras present -> (1, cams, S, S, 3) uint8, mask (1, cams).

    A missing camera gets a black image and mask False: the model excludes its tokens from
    attention (as openpi does), so its content cannot leak into the actions.
    """
    unknown = sorted(set(images) - set(slots))
    if unknown:
        raise ValueError(f'images: unknown camera slots {unknown}; known: {list(slots)}')
    for slot, image in images.items():
        if image is None:
            continue
        dtype, shape = getattr(image, 'dtype', None), getattr(image, 'shape', None)
        if dtype != np.uint8 or shape != (size, size, 3):
            raise ValueError(f'images[{slot!r}]: must be ({size}, {size}, 3) uint8 as '
                             f'preprocess_image makes it, got {dtype} {shape}')
    blank = np.zeros((size, size, 3), np.uint8)
    pixels = np.stack([images[s] if images.get(s) is not None else blank for s in slots])
    mask = np.array([[images.get(s) is not None for s in slots]])
    return pixels[None], mask
