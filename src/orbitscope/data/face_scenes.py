"""A built-in labelled face-detection set: real face crops pasted on real photographs, exact boxes.

Faces (:data:`FACE_CROPS`): rectangles cut from real photographs that install offline, each around
one face from about the hairline to just below the chin and from cheek to cheek. The rectangles
were **chosen by eye** on the photos (no detector placed them):

* scikit-image's ``astronaut`` (Eileen Collins, NASA, public domain) and ``camera`` (the
  cameraman, grey, three-quarter view);
* matplotlib's sample photo ``grace_hopper.jpg`` (US Navy, public domain);
* Debian ``opencv-doc``'s ``messi5.jpg`` (a footballer, small: 34 × 38 px), ``basketball1.png``
  (grey, small: 33 × 41 px) and ``left06.jpg`` (grey, near profile, with glasses). These are
  used when opencv-doc is installed (``make test`` / ``make demo`` install it as root); without
  it the set has the first three faces only, and its ``data_id`` says which faces it used.

Backgrounds (:data:`FACE_BACKGROUNDS`): real photographs with no human face (scikit-image's
``coffee``, ``chelsea`` (a cat), ``rocket``, ``brick``, ``grass``, ``gravel``; scikit-learn's
``china`` and ``flower``; grey ones repeated to three channels).

Scene ``i`` is drawn from ``numpy.random.default_rng([seed, i])``: a background and a random
``size`` × ``size`` crop of it; then ``faces`` face crops, each resized (PIL bilinear) to a width
drawn from ``width`` pixels (height keeps the crop's aspect), mirrored left–right with
probability ½, its values multiplied by a gain drawn from ``gain`` (rounded and clipped to
0–255), and pasted as an opaque rectangle. The first face is placed where a context of
``view + 2·max_shift`` pixels centred on it lies inside the scene (what
:func:`~orbitscope.data.coco.key_object_contexts` needs); further faces go anywhere they do not
overlap the faces already placed. Grey faces stay grey.

**Box convention**: a face's box is the pasted rectangle itself, xyxy in pixel edges
(``(px, py, px + w, py + h)``), exact by construction. It is the crop's box (hairline to chin,
cheek to cheek, as chosen above), *not* the convention of any detector's training boxes (MTCNN's
WIDER FACE boxes are squarer and tighter at the top), so IoU with a perfect detector's box is
below 1. Measured for MTCNN at the centred 128-px view over ``face_contexts(100)``: mean IoU
of its top box 0.75 (0.80–0.88 per frontal crop, 0.46 for the near-profile ``left06`` face,
which it often misses); 92 % of the faces are found at IoU ≥ 0.5 (see
``orbitscope.demos.faces``). Deterministic: the same arguments (and the same installed photos)
give the same scenes, bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
from PIL import Image

from ..errors import DataError
from .coco import DetectionSet, key_object_contexts

__all__ = ["FaceCrop", "FacePlacement", "FACE_CROPS", "FACE_BACKGROUNDS", "OPENCV_EXAMPLES", "face_crops",
           "face_backgrounds", "face_patch", "draw_face_scene", "face_scenes", "face_contexts"]

#: where Debian's opencv-doc puts OpenCV's example photos
OPENCV_EXAMPLES = Path("/usr/share/doc/opencv-doc/examples/data")


class FaceCrop(NamedTuple):
    """A face rectangle in a source photo: ``source`` is ``"skimage:NAME"``,
    ``"matplotlib:FILE"`` (matplotlib's sample data) or ``"opencv-doc:FILE"``; ``box`` is
    ``(x0, y0, x1, y1)`` pixel edges of the source image."""

    source: str
    box: tuple[int, int, int, int]
    what: str


class FacePlacement(NamedTuple):
    """How one face was pasted: which crop (its ``source``), its box in the scene (xyxy pixel
    edges; width and height are the resized crop's), whether it was mirrored, and the gain."""

    source: str
    box: tuple[int, int, int, int]
    mirror: bool
    gain: float


#: the face rectangles (chosen by eye, see the module docstring)
FACE_CROPS: tuple[FaceCrop, ...] = (
    FaceCrop("skimage:astronaut", (176, 78, 272, 172), "Eileen Collins, frontal, smiling"),
    FaceCrop("matplotlib:grace_hopper.jpg", (168, 122, 362, 335), "Grace Hopper, frontal, glasses"),
    FaceCrop("skimage:camera", (195, 125, 258, 200), "the cameraman, grey, three-quarter view"),
    FaceCrop("opencv-doc:messi5.jpg", (222, 93, 256, 131), "footballer, small, looking down"),
    FaceCrop("opencv-doc:basketball1.png", (71, 94, 104, 135), "man, grey, small, slightly turned"),
    FaceCrop("opencv-doc:left06.jpg", (238, 128, 332, 234), "man, grey, near profile, glasses"),
)
#: background photographs without human faces
FACE_BACKGROUNDS: tuple[str, ...] = ("coffee", "chelsea", "rocket", "brick", "grass", "gravel", "china", "flower")


def _rgb(arr: np.ndarray) -> np.ndarray:
    arr = np.asarray(arr)
    return np.ascontiguousarray(np.repeat(arr[..., None], 3, -1) if arr.ndim == 2 else arr[..., :3]).astype(np.uint8)


def _read(path: Path) -> np.ndarray:
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc


def _source(source: str) -> np.ndarray | None:
    """(H, W, 3) uint8 RGB, or None when an optional photo (opencv-doc) is not installed."""
    kind, _, name = source.partition(":")
    if kind == "skimage":
        try:
            import skimage.data
        except ImportError as exc:  # pragma: no cover - a dependency of the test extra
            raise DataError("the face scenes need scikit-image's sample photographs: pip install scikit-image") from exc
        return _rgb(getattr(skimage.data, name)())
    if kind == "matplotlib":
        import matplotlib

        return _read(Path(matplotlib.get_data_path()) / "sample_data" / name)
    if kind == "opencv-doc":
        path = OPENCV_EXAMPLES / name
        return _read(path) if path.is_file() else None
    raise DataError(f"unknown face source {source!r}")


def face_crops(crops: Sequence[FaceCrop] = FACE_CROPS) -> list[tuple[FaceCrop, np.ndarray]]:
    """The installed ``crops`` with their pixels ((h, w, 3) uint8 RGB), in order; crops from
    opencv-doc are left out when it is not installed.

    Raises:
        DataError: no crop is available, or a rectangle leaves its photo.
    """
    out = []
    for c in crops:
        img = _source(c.source)
        if img is None:
            continue
        x0, y0, x1, y1 = c.box
        if not (0 <= x0 < x1 <= img.shape[1] and 0 <= y0 < y1 <= img.shape[0]):
            raise DataError(f"face rectangle {c.box} leaves {c.source} ({img.shape[1]} × {img.shape[0]})")
        out.append((c, np.ascontiguousarray(img[y0:y1, x0:x1])))
    if not out:
        raise DataError("no face photo is available: install scikit-image (and opencv-doc for more faces)")
    return out


def face_backgrounds(names: Sequence[str] = FACE_BACKGROUNDS) -> list[tuple[str, np.ndarray]]:
    """The background photographs as ``(name, (H, W, 3) uint8 RGB)``: scikit-image's, or
    scikit-learn's ``china`` and ``flower``."""
    sample: dict[str, np.ndarray] = {}
    if {"china", "flower"} & set(names):
        from sklearn.datasets import load_sample_images

        sample = dict(zip(("china", "flower"), load_sample_images().images))
    out = []
    for n in names:
        img = _rgb(sample[n]) if n in sample else _source(f"skimage:{n}")
        assert img is not None  # scikit-image's photos are always there
        out.append((n, img))
    return out


def face_patch(pixels: np.ndarray, width: int, height: int, mirror: bool, gain: float) -> np.ndarray:
    """A face crop ((h, w, 3) uint8) as pasted: resized (PIL bilinear) to ``width`` × ``height``,
    mirrored left–right if ``mirror``, times ``gain`` rounded and clipped to 0–255."""
    im = np.asarray(Image.fromarray(pixels).resize((int(width), int(height)), Image.BILINEAR), np.float64)
    if mirror:
        im = im[:, ::-1]
    return np.clip(np.round(im * float(gain)), 0, 255).astype(np.uint8)


def draw_face_scene(i: int, *, seed: int = 0, size: int = 256, faces: tuple[int, int] = (1, 1),
                    width: tuple[int, int] = (32, 80), gain: tuple[float, float] = (0.8, 1.2), context: int = 160,
                    crops: Sequence[tuple[FaceCrop, np.ndarray]] | None = None,
                    backgrounds: Sequence[tuple[str, np.ndarray]] | None = None) -> tuple[np.ndarray, str, list[FacePlacement]]:
    """Scene ``i`` (see the module docstring): ``(image (size, size, 3) uint8, background name,
    placements)``; ``context`` is the side of the context that must fit around the first face.
    ``crops`` and ``backgrounds`` default to :func:`face_crops` and :func:`face_backgrounds`."""
    crops = face_crops() if crops is None else crops
    backgrounds = face_backgrounds() if backgrounds is None else backgrounds
    rng = np.random.default_rng([seed, i])
    b = int(rng.integers(len(backgrounds)))
    bg_name, bg = backgrounds[b]
    y0, x0 = int(rng.integers(bg.shape[0] - size + 1)), int(rng.integers(bg.shape[1] - size + 1))
    canvas = np.array(bg[y0:y0 + size, x0:x0 + size])
    placed: list[FacePlacement] = []
    half = context // 2
    for k in range(int(rng.integers(faces[0], faces[1] + 1))):
        crop, pixels = crops[int(rng.integers(len(crops)))]
        w = int(rng.integers(width[0], width[1] + 1))
        h = max(1, int(round(w * pixels.shape[0] / pixels.shape[1])))
        mirror, g = bool(rng.integers(2)), float(rng.uniform(*gain))
        if h > size or w > size:
            continue
        for _attempt in range(50):
            px, py = int(rng.integers(size - w + 1)), int(rng.integers(size - h + 1))
            box = (px, py, px + w, py + h)
            if k == 0:  # the key face: its centred context must lie inside the scene
                cx, cy = int(round(px + w / 2)), int(round(py + h / 2))
                if cx - half < 0 or cy - half < 0 or cx - half + context > size or cy - half + context > size:
                    continue
            if all(box[2] <= o.box[0] or o.box[2] <= box[0] or box[3] <= o.box[1] or o.box[3] <= box[1]
                   for o in placed):
                break
        else:
            continue
        canvas[py:py + h, px:px + w] = face_patch(pixels, w, h, mirror, g)
        placed.append(FacePlacement(crop.source, box, mirror, g))
    return canvas, bg_name, placed


def face_scenes(n: int, *, size: int = 256, faces: tuple[int, int] = (1, 1), width: tuple[int, int] = (32, 80),
                gain: tuple[float, float] = (0.8, 1.2), view: int = 128, max_shift: int = 16,
                seed: int = 0) -> DetectionSet:
    """``n`` scenes of ``size`` × ``size`` RGB pixels with pasted faces (see the module docstring),
    label 0 = ``"face"``; the first face of each scene has room for a (view + 2·max_shift)² context.

    Raises:
        DataError: arguments that cannot give such scenes.
    """
    context = view + 2 * max_shift
    if n < 1 or not 1 <= faces[0] <= faces[1]:
        raise DataError(f"need n >= 1 scenes with 1 <= faces[0] <= faces[1], got n={n}, faces={faces}")
    if not 8 <= width[0] <= width[1] or context + width[1] > size or not 0 < gain[0] <= gain[1]:
        raise DataError(f"need 8 <= width low <= high, (view + 2·max_shift) + width high <= size and "
                        f"0 < gain low <= high; got width={width}, view={view}, max_shift={max_shift}, size={size}, "
                        f"gain={gain}")
    crops, backgrounds = face_crops(), face_backgrounds()
    if min(min(bg.shape[:2]) for _, bg in backgrounds) < size:
        raise DataError(f"size {size} is larger than a background photo")
    images, targets, names = [], [], []
    for i in range(n):
        img, bg, placed = draw_face_scene(i, seed=seed, size=size, faces=faces, width=width, gain=gain,
                                          context=context, crops=crops, backgrounds=backgrounds)
        images.append(np.ascontiguousarray(img.transpose(2, 0, 1)))
        targets.append({"boxes": np.asarray([p.box for p in placed], np.float32).reshape(-1, 4),
                        "labels": np.zeros(len(placed), np.int64)})
        names.append(f"faces{i:05d}-{bg}.png")
    used = ",".join(c.source.split(":", 1)[1].split(".")[0] for c, _ in crops)
    return DetectionSet.from_arrays(images, targets, {0: "face"},
                                    f"face-scenes:v1:n{n}:s{size}:f{faces[0]}-{faces[1]}:w{width[0]}-{width[1]}:"
                                    f"g{gain[0]:g}-{gain[1]:g}:c{context}:seed{seed}:{used}", names=names)


def face_contexts(n: int, *, view: int = 128, max_shift: int = 16, size: int = 256, faces: tuple[int, int] = (1, 1),
                  width: tuple[int, int] = (32, 80), gain: tuple[float, float] = (0.8, 1.2),
                  seed: int = 0) -> DetectionSet:
    """NERO's key-object set over ``face_scenes(n, ...)``: ``n`` contexts of
    (view + 2·max_shift)² pixels, each centred on a face (box 0 of its target; other faces in
    the context follow, clipped), so a window-shift orbit up to ``max_shift`` keeps that face in
    view. With one face per scene (the default) context ``i`` is scene ``i``'s face; with more,
    other faces whose context fits give contexts too, in scene order, up to ``n``."""
    scenes = face_scenes(n, size=size, faces=faces, width=width, gain=gain, view=view, max_shift=max_shift, seed=seed)
    return key_object_contexts(scenes, view=view, max_shift=max_shift, area=(0.0, 1.0), limit=n)
