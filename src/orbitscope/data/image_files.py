"""Image files read safely: the size an image declares is checked before a pixel is decoded, and
pixels are read at their depth.

Every loader that reads image files (``folder:``, ``flow-folder:``, the images of ``coco:``) opens
them with :func:`open_image` and decodes them with :func:`read_image`, so they share one bound
and one reading of bit depths.

Limits:
    :data:`MAX_IMAGE_PIXELS` (default 67,108,864 = 8192 × 8192 pixels) bounds the width × height
    an image file may declare. PIL reads the declared size from the header without decoding
    (``Image.open`` is lazy), so a 200-byte file declaring 12000 × 12000 pixels is refused before
    anything is allocated. Raise the bound with the environment variable
    ``ORBITSCOPE_MAX_IMAGE_PIXELS`` (command line and Python alike), or per loader with its
    ``max_pixels`` argument. Pillow's own decompression-bomb check is replaced by this one while a
    header is read (Pillow's warning and error never reach the user); it stays in force elsewhere.

Depths (what :func:`read_image` returns, float32 in [0, 1]):
    8-bit images (and every mode PIL converts to 8 bits: palette, bilevel, CMYK, RGBA, ...) ->
    value / 255, computed in float32 exactly as ``uint8_tensor.float() / 255``; 16-bit grey
    (PIL modes ``I;16*``) and 32-bit integer images (mode ``I``, values must lie in 0..65535) ->
    value / 65535; 32-bit float images (mode ``F``) must already lie in [0, 1] and are kept.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

from ..errors import DataError

__all__ = ["MAX_IMAGE_PIXELS", "MAX_IMAGE_PIXELS_ENV", "image_pixel_limit", "open_image", "read_image",
           "DECODE_ERRORS"]

#: Default bound on the pixels (width × height) an image file may declare: 8192 × 8192.
MAX_IMAGE_PIXELS = 8192 * 8192
#: Environment variable overriding :data:`MAX_IMAGE_PIXELS` (a positive integer).
MAX_IMAGE_PIXELS_ENV = "ORBITSCOPE_MAX_IMAGE_PIXELS"
#: What PIL raises on a corrupt, truncated or unsupported file while opening or decoding it.
DECODE_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, EOFError, SyntaxError, IndexError,
                                                  struct.error, zlib.error, Image.DecompressionBombError)

_PIL_GLOBALS = threading.Lock()  # guards the moment Pillow's own bomb check is off (see open_image)


def image_pixel_limit(max_pixels: int | None = None) -> int:
    """The pixel bound in force: ``max_pixels`` when given, else ``$ORBITSCOPE_MAX_IMAGE_PIXELS``
    when set, else :data:`MAX_IMAGE_PIXELS`.

    Args:
        max_pixels: an explicit bound (a positive integer), e.g. a loader's ``max_pixels`` argument.

    Raises:
        DataError: ``max_pixels`` or the variable is not a positive integer.
    """
    if max_pixels is not None:
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, (int, np.integer)) or max_pixels < 1:
            raise DataError(f"max_pixels must be a positive integer (pixels, width × height), got "
                            f"{str(max_pixels)[:40]}")
        return int(max_pixels)
    raw = os.environ.get(MAX_IMAGE_PIXELS_ENV, "").strip().replace("_", "")
    if not raw:
        return MAX_IMAGE_PIXELS
    if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
        raise DataError(f"${MAX_IMAGE_PIXELS_ENV}={raw[:40]!r} is not a positive integer (pixels, width × height)")
    return int(raw)


@contextmanager
def open_image(path: str | os.PathLike[str], max_pixels: int | None = None) -> Iterator[Image.Image]:
    """``PIL.Image.open`` whose declared size is checked before any pixel is decoded.

    Args:
        path: the image file.
        max_pixels: the bound on width × height (default: :func:`image_pixel_limit`).

    Yields:
        The lazily opened image (closed on exit); nothing is decoded yet.

    Raises:
        DataError: not a readable image, or it declares more pixels than the bound (the message
            names the file, its declared size, the bound and how to raise it).
    """
    path = Path(path)
    limit = image_pixel_limit(max_pixels)
    with _PIL_GLOBALS:  # Pillow's bomb check would warn (or raise) before ours; ours replaces it here
        saved, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
        try:
            im = Image.open(path)
        except DECODE_ERRORS as exc:  # PIL.UnidentifiedImageError is an OSError
            raise DataError(f"{path}: not a readable image ({exc}); replace or remove the file") from exc
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    with im:
        w, h = im.size
        if w * h > limit:
            raise DataError(f"{path} declares {h}x{w} (HxW) = {w * h:,} pixels, over the image limit of {limit:,} "
                            f"pixels; if the image is genuine, raise the limit with the environment variable "
                            f"{MAX_IMAGE_PIXELS_ENV}={w * h} (or the loader's max_pixels argument)")
        yield im


def _to_unit(im: Image.Image, path: Path, colour: bool, size: tuple[int, int] | None) -> np.ndarray:
    """Decode an open image to float32 in [0, 1] (see the module docstring for the depths)."""
    mode = im.mode
    if mode.startswith("I;16") or mode == "I" or mode == "F":
        if size is not None:  # resample the values themselves, in float32 (exact for 16-bit integers)
            im = im.convert("F").resize((size[1], size[0]), Image.Resampling.BILINEAR)
        if mode == "F":
            arr = np.asarray(im, np.float32)
            if not (np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= 1):
                raise DataError(f"{path}: float pixels must lie in [0, 1]")
            arr = arr.copy()
        else:
            wide = np.asarray(im).astype(np.float64)
            if wide.min() < 0 or wide.max() > 65535:
                raise DataError(f"{path}: integer pixels outside 0..65535")
            arr = (wide / 65535).astype(np.float32)
        return np.repeat(arr[..., None], 3, axis=-1) if colour else arr
    im = im.convert("RGB" if colour else "L")
    if size is not None:
        im = im.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return np.asarray(im, np.float32) / np.float32(255)


def read_image(path: str | os.PathLike[str], *, colour: bool = False, size: tuple[int, int] | None = None,
               max_pixels: int | None = None) -> np.ndarray:
    """An image file as float32 in [0, 1], read at its depth, its declared size checked first.

    Args:
        path: the image file.
        colour: RGB (H, W, 3) instead of grey (H, W); grey from colour is PIL's "L" (ITU-R 601-2
            luma), colour from grey repeats the grey value.
        size: resize bilinearly to (H, W) (PIL's filter; 16-bit and float images are resampled as
            float32 values).
        max_pixels: the bound on the declared width × height (default: :func:`image_pixel_limit`).

    Returns:
        float32 (H, W) or (H, W, 3): 8-bit values / 255, 16-bit (and 32-bit integer) values /
        65535, float images as stored (they must lie in [0, 1]).

    Raises:
        DataError: unreadable, corrupt or truncated file, too many declared pixels, or values
            outside the range of its depth; the message names the file and what to do.
    """
    path = Path(path)
    with open_image(path, max_pixels) as im:
        try:
            return _to_unit(im, path, colour, size)
        except DataError:
            raise
        except DECODE_ERRORS as exc:
            raise DataError(f"{path}: cannot decode the image ({exc}); replace or remove the file") from exc
