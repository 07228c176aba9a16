"""Real detectors that ship their trained parameters offline, as models for the Detection task.

* :class:`HaarCascade`: OpenCV's Viola–Jones cascades (``cv2.data.haarcascades``: frontal and
  profile faces, eyes, full, upper and lower bodies, …), run with ``detectMultiScale3``;
* :class:`HOGPeople`: OpenCV's HOG + linear SVM people detector (Dalal & Triggs 2005);
* :class:`LBPFace`: scikit-image's LBP frontal-face cascade (``skimage.feature.Cascade``).

Each maps images (B, C, H, W) in [0, 1] to torchvision-style ``list[dict(boxes, scores, labels)]``
(xyxy pixels). Scores: OpenCV's level weight (cascades) or SVM margin (HOG) through the logistic
function σ(w) = 1 / (1 + e^(−w)), so higher is more confident and scores lie in (0, 1) (the
ranking is OpenCV's own); scikit-image's cascade gives no score: 1. All labels are ``label``.

Sliding windows on a stride and a scale pyramid make these detectors *not* shift-equivariant:
their boxes jump as the object moves by a few pixels, which their NERO heatmaps show. They need
``opencv-python-headless`` and ``scikit-image`` (installed by ``make test``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import SpecError

__all__ = ["HaarCascade", "HOGPeople", "LBPFace", "haar_cascades"]


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - installed by make test
        raise SpecError("OpenCV detectors need opencv-python-headless: pip install 'opencv-python-headless<5'") from exc
    return cv2


def _grey_uint8(x: Tensor) -> list[np.ndarray]:
    """(B, C, H, W) in [0, 1] -> B grey uint8 images (ITU-R 601 luma for RGB)."""
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"detectors take images (B, 1 or 3, H, W) in [0, 1], got shape {tuple(x.shape)}")
    a = x.detach().float().cpu().clamp(0, 1).numpy()
    grey = a[:, 0] if a.shape[1] == 1 else 0.299 * a[:, 0] + 0.587 * a[:, 1] + 0.114 * a[:, 2]
    return [np.ascontiguousarray((g * 255).round().astype(np.uint8)) for g in grey]


def _as_output(rects: Any, weights: Any, label: int) -> dict[str, Tensor]:
    r = np.asarray(rects, dtype=np.float32).reshape(-1, 4)
    w = np.asarray(weights, dtype=np.float64).reshape(-1) if len(r) else np.zeros(0)
    boxes = np.concatenate([r[:, :2], r[:, :2] + r[:, 2:]], 1)
    return {"boxes": torch.from_numpy(boxes), "scores": torch.from_numpy((1 / (1 + np.exp(-w))).astype(np.float32)),
            "labels": torch.full((len(r),), int(label), dtype=torch.int64)}


def haar_cascades() -> list[str]:
    """Names of the Haar cascades OpenCV ships (for :class:`HaarCascade`)."""
    import os

    folder = _cv2().data.haarcascades
    return sorted(f[len("haarcascade_"):-4] for f in os.listdir(folder) if f.startswith("haarcascade_") and f.endswith(".xml"))


class HaarCascade(nn.Module):
    """One of OpenCV's Haar cascades (see :func:`haar_cascades`), e.g. ``"frontalface_default"``.

    Args:
        name: the cascade; scale_factor, min_neighbors, min_size: ``detectMultiScale3``'s.
        label: the class id given to every detection.
    """

    def __init__(self, name: str = "frontalface_default", *, scale_factor: float = 1.1, min_neighbors: int = 3,
                 min_size: tuple[int, int] = (24, 24), label: int = 1) -> None:
        super().__init__()
        cv2 = _cv2()
        if name not in haar_cascades():
            raise SpecError(f"no Haar cascade {name!r}; OpenCV ships {', '.join(haar_cascades())}")
        self.cascade_name, self.scale_factor, self.min_neighbors = name, float(scale_factor), int(min_neighbors)
        self.min_size, self.label = tuple(int(v) for v in min_size), int(label)
        self._cascade = cv2.CascadeClassifier(f"{cv2.data.haarcascades}haarcascade_{name}.xml")

    def extra_repr(self) -> str:  # part of the run identity (the module has no weights)
        return (f"{self.cascade_name}, opencv={_cv2().__version__}, scale_factor={self.scale_factor}, "
                f"min_neighbors={self.min_neighbors}, min_size={self.min_size}, label={self.label}")

    def forward(self, x: Tensor) -> list[dict[str, Tensor]]:
        out = []
        for g in _grey_uint8(x):
            rects, _, weights = self._cascade.detectMultiScale3(
                g, scaleFactor=self.scale_factor, minNeighbors=self.min_neighbors, minSize=self.min_size,
                outputRejectLevels=True)
            out.append(_as_output(rects, weights, self.label))
        return out


class HOGPeople(nn.Module):
    """OpenCV's default HOG people detector (64 × 128 windows), ``detectMultiScale`` with
    ``win_stride`` and ``scale``."""

    def __init__(self, *, win_stride: tuple[int, int] = (8, 8), scale: float = 1.05, label: int = 1) -> None:
        super().__init__()
        cv2 = _cv2()
        self.win_stride, self.scale, self.label = tuple(int(v) for v in win_stride), float(scale), int(label)
        self._hog = cv2.HOGDescriptor()
        self._hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())

    def extra_repr(self) -> str:
        return f"opencv={_cv2().__version__}, win_stride={self.win_stride}, scale={self.scale}, label={self.label}"

    def forward(self, x: Tensor) -> list[dict[str, Tensor]]:
        out = []
        for g in _grey_uint8(x):
            if g.shape[0] < 128 or g.shape[1] < 64:
                out.append(_as_output(np.zeros((0, 4)), np.zeros(0), self.label))
                continue
            rects, weights = self._hog.detectMultiScale(g, winStride=self.win_stride, scale=self.scale)
            out.append(_as_output(rects, weights, self.label))
        return out


class LBPFace(nn.Module):
    """scikit-image's LBP frontal-face cascade (``skimage.feature.Cascade.detect_multi_scale``)."""

    def __init__(self, *, scale_factor: float = 1.2, step_ratio: float = 1.0, min_size: tuple[int, int] = (24, 24),
                 label: int = 1) -> None:
        super().__init__()
        try:
            from skimage import data
            from skimage.feature import Cascade
        except ImportError as exc:  # pragma: no cover - installed by make test
            raise SpecError("LBPFace needs scikit-image: pip install scikit-image") from exc
        self.scale_factor, self.step_ratio = float(scale_factor), float(step_ratio)
        self.min_size, self.label = tuple(int(v) for v in min_size), int(label)
        self._cascade = Cascade(data.lbp_frontal_face_cascade_filename())

    def extra_repr(self) -> str:
        import skimage

        return (f"skimage={skimage.__version__}, scale_factor={self.scale_factor}, step_ratio={self.step_ratio}, "
                f"min_size={self.min_size}, label={self.label}")

    def forward(self, x: Tensor) -> list[dict[str, Tensor]]:
        out = []
        for g in _grey_uint8(x):
            found = self._cascade.detect_multi_scale(g.astype(np.float64) / 255.0, scale_factor=self.scale_factor,
                                                     step_ratio=self.step_ratio, min_size=self.min_size,
                                                     max_size=g.shape)
            rects = np.asarray([[d["c"], d["r"], d["width"], d["height"]] for d in found], np.float32).reshape(-1, 4)
            out.append({**_as_output(rects, np.zeros(len(rects)), self.label),
                        "scores": torch.ones(len(rects), dtype=torch.float32)})
        return out
