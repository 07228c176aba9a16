"""Real, unlabelled photographs of people and faces, for label-free detection NERO (consensus).

Sources that install offline:

* frames of OpenCV's pedestrian video ``vtest.avi`` and the photo ``messi5.jpg``, from Debian's
  ``opencv-doc`` package (``/usr/share/doc/opencv-doc/examples/data``; ``make test`` and
  ``make demo`` install it when run as root);
* scikit-image's ``astronaut`` (Eileen Collins, NASA; public domain).

A context is a square crop of ``view + 2·max_shift`` pixels centred on a person or a face, so the
field of view keeps it in sight at every shift of the orbit. The centres are listed in
:data:`PEOPLE` and :data:`FACES`; they were **chosen by eye** from the photos (no detector was
run to place them) and carry no boxes: these contexts have no labels, and their NERO plots come
from the consensus (``evaluate(..., consensus=True)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import DataError
from .coco import DetectionSet

__all__ = ["OPENCV_EXAMPLES", "PhotoContext", "PEOPLE", "FACES", "photo_contexts", "opencv_examples_available"]

#: where Debian's opencv-doc puts OpenCV's example data
OPENCV_EXAMPLES = Path("/usr/share/doc/opencv-doc/examples/data")


class PhotoContext(NamedTuple):
    """One context: ``source`` is ``"vtest.avi#FRAME"``, an opencv-doc file name, or
    ``"skimage:NAME"``; ``(x, y)`` the centre in pixels of the source image (chosen by eye)."""

    source: str
    x: int
    y: int
    what: str


#: pedestrians in OpenCV's vtest.avi (768 × 576), about 90 px tall
PEOPLE: tuple[PhotoContext, ...] = (
    PhotoContext("vtest.avi#0", 268, 262, "person on the grass, frame 0"),
    PhotoContext("vtest.avi#0", 515, 195, "person on the road, frame 0"),
    PhotoContext("vtest.avi#0", 640, 282, "person walking right, frame 0 (near the right edge)"),
)
#: frontal faces: the centres of the by-eye face rectangles of
#: :data:`orbitscope.data.face_scenes.FACE_CROPS` (earlier centres, (192, 82) and (286, 104), were off
#: the faces, which the view then cut)
FACES: tuple[PhotoContext, ...] = (
    PhotoContext("skimage:astronaut", 224, 125, "Eileen Collins (scikit-image astronaut)"),
    PhotoContext("messi5.jpg", 239, 112, "footballer (OpenCV messi5.jpg), a small face (about 34 px)"),
)


def opencv_examples_available() -> bool:
    """Whether opencv-doc's example data (vtest.avi, messi5.jpg) is installed."""
    return (OPENCV_EXAMPLES / "vtest.avi").is_file()


def _cv2():  # noqa: ANN202 - optional dependency
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - installed by make test
        raise DataError("reading OpenCV's example photos needs opencv-python-headless: "
                        "pip install 'opencv-python-headless<5'") from exc
    return cv2


def _source_image(source: str) -> np.ndarray:
    """(H, W, 3) uint8 RGB."""
    if source.startswith("skimage:"):
        import skimage.data

        img = getattr(skimage.data, source.split(":", 1)[1])()
        return np.ascontiguousarray(np.repeat(img[..., None], 3, -1) if img.ndim == 2 else img[..., :3])
    cv2 = _cv2()
    name, _, frame = source.partition("#")
    path = OPENCV_EXAMPLES / name
    if not path.is_file():
        raise DataError(f"{path} is missing: install Debian's opencv-doc (sudo apt-get install opencv-doc; "
                        "make test / make demo do it when run as root)")
    if frame:
        cap = cv2.VideoCapture(str(path))
        try:
            cap.set(cv2.CAP_PROP_POS_FRAMES, int(frame))
            ok, bgr = cap.read()
        finally:
            cap.release()
        if not ok:
            raise DataError(f"could not read frame {frame} of {path} (OpenCV's video backend)")
    else:
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DataError(f"could not read {path}")
    return np.ascontiguousarray(bgr[..., ::-1])


def photo_contexts(contexts: Sequence[PhotoContext], *, view: int, max_shift: int) -> DetectionSet:
    """Unlabelled context crops ((view + 2·max_shift)², CHW uint8 RGB) centred on ``contexts``.

    Raises:
        DataError: a source is missing (opencv-doc not installed) or a crop would leave its
            image (lower ``view`` or ``max_shift``).
    """
    if view < 1 or max_shift < 0:
        raise DataError(f"view must be positive and max_shift non-negative, got {view}, {max_shift}")
    size = view + 2 * max_shift
    cache: dict[str, np.ndarray] = {}
    images, targets, names = [], [], []
    for c in contexts:
        if c.source not in cache:
            cache[c.source] = _source_image(c.source)
        img = cache[c.source]
        x0, y0 = c.x - size // 2, c.y - size // 2
        if x0 < 0 or y0 < 0 or x0 + size > img.shape[1] or y0 + size > img.shape[0]:
            raise DataError(f"a {size}² context around ({c.x}, {c.y}) leaves {c.source} ({img.shape[1]} × "
                            f"{img.shape[0]}); lower view or max_shift")
        images.append(np.ascontiguousarray(img[y0:y0 + size, x0:x0 + size].transpose(2, 0, 1)))
        targets.append({"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)})
        names.append(f"{c.source.replace(':', '-').replace('#', '-frame')}-{c.x}-{c.y}.png")
    key = ",".join(f"{c.source}@{c.x},{c.y}" for c in contexts)
    return DetectionSet.from_arrays(images, targets, {}, f"photos:{key}:v{view}:s{max_shift}", names=names)
