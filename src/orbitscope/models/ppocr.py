"""PaddleOCR's pretrained text detector (PP-OCRv4, DBNet) and text-line orientation classifier,
run through ONNX Runtime as models for the Detection and Classification tasks.

The ONNX files ship inside PyPI ``rapidocr-onnxruntime`` 1.4.4 (``rapidocr_onnxruntime/models/``:
``ch_PP-OCRv4_det_infer.onnx``, ``ch_ppocr_mobile_v2.0_cls_infer.onnx``). They are found through
the package's import location (:func:`importlib.util.find_spec`) without importing it: the runtime
needs only onnxruntime, numpy and opencv-python-headless. Install them with
``pip install --no-deps rapidocr-onnxruntime==1.4.4`` (its declared dependencies are not needed).

:class:`PPOCRTextDetector` (Liao, Wan, Yao, Chen & Bai 2020, "Real-time Scene Text Detection with
Differentiable Binarization", AAAI; PaddleOCR's DB post-processing):

1. images (B, 3, H, W) RGB in [0, 1] -> 8-bit BGR (PaddleOCR's models read OpenCV's channel
   order), resized (bilinear, ``cv2.resize`` on the 8-bit image) to (h, w): with ``limit_type="min"`` the shorter side is
   scaled up to ``limit_side_len`` when it is shorter, with ``"max"`` the longer side down to it
   when it is longer; then each side is rounded to a multiple of 32 (``round(side / 32) · 32``,
   at least 32) because the network downsamples 32×; normalised (v − mean) / std with
   mean = std = 0.5 per channel (rapidocr's ``config.yaml``);
2. the network gives the text probability map P (B, 1, h, w) (its head upsamples stride-4
   features 4×);
3. per image: the bitmap P > ``thresh`` (0.3), dilated by a 2 × 2 kernel (``use_dilation``); the
   outer and inner contours of its components (at most ``max_candidates``); for each, its
   minimum-area rectangle (``cv2.minAreaRect``), dropped when its short side is under
   ``min_size`` (3) px; its score is the mean of P over the rectangle (DB's "fast" score, the
   rectangle rasterised with integer corners), dropped below ``box_thresh``;
4. unclip: DB's shrunk text kernel is grown back by the offset distance D = A · r / L (A the
   rectangle's area, L its perimeter, r = ``unclip_ratio``). For a rectangle the offset polygon
   (round joins) has as its minimum-area rectangle the rectangle grown by D on each side, which
   is what is computed (no polygon clipping library); dropped when its short side is under
   ``min_size + 2``;
5. the grown rectangle's corners are scaled back to the input, (x · W / w, y · H / h), rounded and
   clipped to [0, W] × [0, H]; the output box is their axis-aligned hull, xyxy pixels; boxes
   whose width or height is at most 3 px are dropped (PaddleOCR's final filter).

Outputs are torchvision-style ``list[dict(boxes (n, 4) xyxy, scores (n,), labels (n,))]``, label 0 =
text, scores in [0, 1] (the mean probability inside the shrunk region), sorted by score.

Defaults are rapidocr 1.4.4's ``config.yaml`` (``limit_side_len`` 736, ``limit_type`` "min",
``thresh`` 0.3, ``box_thresh`` 0.5, ``unclip_ratio`` 1.6, dilation on, "fast" score); PaddleOCR's
own defaults are ``limit_type="max"``, ``limit_side_len=960``, ``box_thresh=0.6``,
``unclip_ratio=1.5``. With ``limit_type="max"`` small images are not rescaled, only rounded to
multiples of 32 (a 160-px view runs at 160 × 160); with "min" a 160-px view is upscaled 4.6× to
736 px, about 20× the compute.

Equivariance: the network is convolutional but downsamples 32×, so its map can at best be
shift-equivariant for shifts by multiples of 32 px, and only where the receptive field does not
reach the zero-padded borders (in a small view it may reach them nearly everywhere);
its head predicts on a stride-4 grid upsampled 4×; the boxes are rounded to whole pixels; and a
resize (a size not a multiple of 32, or the "min" upscaling) makes the input grid itself
non-equivariant. :mod:`orbitscope.demos.text` measures what is left of it.

:class:`PPOCROrientation` (PaddleOCR's ``ch_ppocr_mobile_v2.0_cls``): a text-line crop (B, 3, H,
W) RGB in [0, 1] -> 8-bit BGR, resized keeping its aspect ratio to height 48 and width
min(192, ⌈48 · W / H⌉), normalised (v − 0.5) / 0.5 and padded with zeros on the right to
3 × 48 × 192; the graph returns the softmax probabilities (B, 2) of :data:`ORIENTATION_LABELS`
``("0", "180")``. PaddleOCR rotates a crop by 180° when its label is "180" with probability above
:data:`ORIENTATION_THRESHOLD` (0.9).

Sources of the published settings: Liao et al. 2020 (DB, the unclip distance D = A·r/L);
PaddleOCR's DB post-processing and inference defaults (github.com/PaddlePaddle/PaddleOCR,
``ppocr/postprocess/db_postprocess.py``, ``tools/infer/utility.py``) and classifier
pre-processing (``tools/infer/predict_cls.py``); rapidocr-onnxruntime 1.4.4's ``config.yaml``.
The code here is written from those descriptions; ``tests/test_ppocr.py`` compares it with
rapidocr's own pipeline.

Both modules hold their :class:`~orbitscope.models.onnx_model.OnnxModel` as ``net`` (its file's
bytes are the weights, so the run identity changes with the file) and say in
``optimization_refused`` why torch's inference optimisation does not apply.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..errors import SpecError
from .onnx_model import OUTSIDE_TORCH_REASON, OnnxModel
from .registry import register_model

__all__ = ["PPOCRTextDetector", "PPOCROrientation", "ppocr_model_path", "db_resize_shape", "db_boxes",
           "DETECTOR_FILE", "ORIENTATION_FILE", "ORIENTATION_LABELS", "ORIENTATION_THRESHOLD", "RAPIDOCR_PIP"]

DETECTOR_FILE = "ch_PP-OCRv4_det_infer.onnx"
ORIENTATION_FILE = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
#: the orientation classifier's classes, in its output order (rapidocr's ``label_list``)
ORIENTATION_LABELS = ("0", "180")
#: PaddleOCR flips a crop when P("180") exceeds this (rapidocr's ``cls_thresh``)
ORIENTATION_THRESHOLD = 0.9
#: the classifier's input (channels, height, width) (rapidocr's ``cls_image_shape``)
ORIENTATION_SHAPE = (3, 48, 192)
RAPIDOCR_PIP = "pip install --no-deps rapidocr-onnxruntime==1.4.4"
_STRIDE = 32
#: pixels (rows × height × width) per ONNX Runtime call: bounds the activations' memory
_PIXELS_PER_CALL = 2 ** 22


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:  # pragma: no cover - a dependency of the detection extra
        raise SpecError("PP-OCR models need opencv-python-headless: pip install 'opencv-python-headless<5'") from exc
    return cv2


def ppocr_model_path(name: str) -> Path:
    """The ONNX file ``name`` (e.g. :data:`DETECTOR_FILE`) in rapidocr-onnxruntime's ``models``
    folder, located without importing the package.

    Raises:
        SpecError: the package is not installed, or its folder has no such file.
    """
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / "models" / name
        if path.is_file():
            return path
    where = f" (looked in {', '.join(str(Path(f) / 'models') for f in folders)})" if folders else ""
    raise SpecError(f"PaddleOCR's ONNX model {name} was not found{where}: it ships inside PyPI rapidocr-onnxruntime; "
                    f"install it with `{RAPIDOCR_PIP}` (its own dependencies are not needed)")


def _bgr_uint8(x: Tensor, what: str) -> np.ndarray:
    """(B, 3, H, W) RGB in [0, 1] -> (B, H, W, 3) uint8 BGR (rounded to 8 bits, as images are
    stored and as PaddleOCR's pipeline resizes them)."""
    if not isinstance(x, Tensor) or x.ndim != 4 or x.shape[1] != 3:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{what} takes RGB images (B, 3, H, W) in [0, 1], got {shape}")
    a = (x.detach().to("cpu", torch.float32).clamp(0, 1) * 255.0).round().to(torch.uint8).numpy()
    return np.ascontiguousarray(a[:, ::-1].transpose(0, 2, 3, 1))


def _resized(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(B, H, W, 3) uint8 -> (B, h, w, 3) uint8, bilinear (``cv2.resize``); unchanged when already
    that size."""
    h, w = size
    if images.shape[1:3] == (h, w):
        return images
    cv2 = _cv2()
    return np.stack([cv2.resize(im, (w, h), interpolation=cv2.INTER_LINEAR) for im in images])


def _run(net: OnnxModel, batch: np.ndarray) -> np.ndarray:
    """The graph on (B, 3, h, w) float32, in slices of at most :data:`_PIXELS_PER_CALL` pixels."""
    if not len(batch):
        raise ValueError("PP-OCR models need at least one image, got an empty batch")
    per = max(1, _PIXELS_PER_CALL // max(1, batch.shape[2] * batch.shape[3]))
    outs = [net(torch.from_numpy(np.ascontiguousarray(batch[i:i + per]))) for i in range(0, len(batch), per)]
    return torch.cat(outs).numpy()


def db_resize_shape(height: int, width: int, limit_side_len: int = 736, limit_type: str = "min") -> tuple[int, int]:
    """(h, w) the detector runs at for an (height, width) image (see the module docstring, step 1)."""
    if limit_type == "min":
        ratio = limit_side_len / min(height, width) if min(height, width) < limit_side_len else 1.0
    elif limit_type == "max":
        ratio = limit_side_len / max(height, width) if max(height, width) > limit_side_len else 1.0
    else:
        raise ValueError(f"limit_type must be 'min' or 'max', got {limit_type!r}")
    return tuple(max(_STRIDE, int(round(int(side * ratio) / _STRIDE)) * _STRIDE)  # type: ignore[return-value]
                 for side in (height, width))


def _rect_score(prob: np.ndarray, corners: np.ndarray) -> float:
    """Mean of ``prob`` over the rectangle ``corners`` (4, 2), rasterised with integer corners
    inside their clipped bounding box (DB's "fast" score)."""
    cv2 = _cv2()
    h, w = prob.shape
    x0, x1 = (int(np.clip(v, 0, w - 1)) for v in (np.floor(corners[:, 0].min()), np.ceil(corners[:, 0].max())))
    y0, y1 = (int(np.clip(v, 0, h - 1)) for v in (np.floor(corners[:, 1].min()), np.ceil(corners[:, 1].max())))
    mask = np.zeros((y1 - y0 + 1, x1 - x0 + 1), np.uint8)
    cv2.fillPoly(mask, [(corners - [x0, y0]).astype(np.int32)], 1)
    return float(cv2.mean(prob[y0:y1 + 1, x0:x1 + 1], mask)[0])


def db_boxes(prob: np.ndarray, image_size: tuple[int, int], *, thresh: float = 0.3, box_thresh: float = 0.5,
             unclip_ratio: float = 1.6, use_dilation: bool = True, max_candidates: int = 1000, min_size: int = 3
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DB post-processing of one probability map (h, w) (see the module docstring, steps 3–5).

    Returns ``(boxes (n, 4) xyxy in the image's pixels, scores (n,), rectangles (n, 4, 2))``: the
    axis-aligned boxes, their scores and the grown rectangles' corners (image pixels, rounded and
    clipped) they are the hull of; ``image_size`` is (H, W) of the image the map was made from.
    """
    cv2 = _cv2()
    prob = np.asarray(prob, np.float32)
    h, w = prob.shape
    height, width = image_size
    bitmap = (prob > thresh).astype(np.uint8)
    if use_dilation:
        bitmap = cv2.dilate(bitmap, np.ones((2, 2), np.uint8))
    contours, _ = cv2.findContours(bitmap * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
    boxes, scores, rects = [], [], []
    for contour in contours[:max_candidates]:
        centre, (rw, rh), angle = cv2.minAreaRect(contour)
        if min(rw, rh) < min_size:
            continue
        score = _rect_score(prob, cv2.boxPoints((centre, (rw, rh), angle)))
        if score < box_thresh:
            continue
        d = rw * rh * unclip_ratio / (2.0 * (rw + rh))  # offset distance D = A·r/L
        grown = (rw + 2 * d, rh + 2 * d)
        if min(grown) < min_size + 2:
            continue
        corners = cv2.boxPoints((centre, grown, angle)).astype(np.float64)
        corners[:, 0] = np.clip(np.round(corners[:, 0] / w * width), 0, width)
        corners[:, 1] = np.clip(np.round(corners[:, 1] / h * height), 0, height)
        box = [corners[:, 0].min(), corners[:, 1].min(), corners[:, 0].max(), corners[:, 1].max()]
        if box[2] - box[0] <= 3 or box[3] - box[1] <= 3:
            continue
        boxes.append(box)
        scores.append(score)
        rects.append(corners)
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    return (np.asarray(boxes, np.float32).reshape(-1, 4)[order], np.asarray(scores, np.float32)[order],
            np.asarray(rects, np.float32).reshape(-1, 4, 2)[order])


class PPOCRTextDetector(nn.Module):
    """PaddleOCR's PP-OCRv4 text detector (DBNet) as a Detection model (see the module docstring).

    Args:
        limit_side_len: the input resize's side length (see ``limit_type``); then multiples of 32.
        limit_type: the input resize (``"min"``: scale the shorter side up to
            ``limit_side_len``; ``"max"``: scale the longer side down to it).
        thresh: probability threshold of the text bitmap.
        box_thresh: least mean probability of a box.
        unclip_ratio: r in the offset distance D = A·r/L.
        use_dilation: dilate the bitmap 2 × 2.
        max_candidates: contours examined per image.
        min_size: least short side (px of the map) of a rectangle.
        path: the ONNX file (default: the one in rapidocr-onnxruntime, :func:`ppocr_model_path`).
        providers: ONNX Runtime providers (default: CUDA where available, else CPU).

    Raises:
        SpecError: the ONNX file is missing (the message says how to install it), onnxruntime or
            OpenCV is not installed, or an argument is out of range.
    """

    optimization_refused = OUTSIDE_TORCH_REASON

    def __init__(self, *, limit_side_len: int = 736, limit_type: str = "min", thresh: float = 0.3,
                 box_thresh: float = 0.5, unclip_ratio: float = 1.6, use_dilation: bool = True,
                 max_candidates: int = 1000, min_size: int = 3, path: str | None = None,
                 providers: Sequence[str] | None = None) -> None:
        super().__init__()
        if limit_type not in ("min", "max"):
            raise SpecError(f"limit_type must be 'min' or 'max', got {limit_type!r}")
        if int(limit_side_len) < _STRIDE:
            raise SpecError(f"limit_side_len must be at least {_STRIDE}, got {limit_side_len}")
        if not (0.0 <= float(thresh) < 1.0 and 0.0 <= float(box_thresh) <= 1.0 and float(unclip_ratio) >= 0.0):
            raise SpecError("thresh must be in [0, 1), box_thresh in [0, 1] and unclip_ratio >= 0")
        _cv2()
        self.limit_side_len, self.limit_type = int(limit_side_len), str(limit_type)
        self.thresh, self.box_thresh, self.unclip_ratio = float(thresh), float(box_thresh), float(unclip_ratio)
        self.use_dilation, self.max_candidates, self.min_size = bool(use_dilation), int(max_candidates), int(min_size)
        self.net = OnnxModel(path or ppocr_model_path(DETECTOR_FILE), providers=providers)
        self.config: dict[str, Any] = {"arch": "ppocr-text-detector", "limit_side_len": self.limit_side_len,
                                       "limit_type": self.limit_type, "thresh": self.thresh,
                                       "box_thresh": self.box_thresh, "unclip_ratio": self.unclip_ratio,
                                       "use_dilation": self.use_dilation, "max_candidates": self.max_candidates,
                                       "min_size": self.min_size, **({"path": path} if path else {})}
        self.eval()

    def extra_repr(self) -> str:  # part of the run identity, with the graph's bytes
        return ", ".join(f"{k}={v!r}" for k, v in self.config.items() if k not in ("arch", "path"))

    def input_size(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) the network runs at for an image of (height, width)."""
        return db_resize_shape(height, width, self.limit_side_len, self.limit_type)

    def probability_map(self, x: Tensor) -> Tensor:
        """Text probability map (B, 1, h, w) at :meth:`input_size` for images x (B, 3, H, W) RGB
        in [0, 1] (on x's device)."""
        images = _bgr_uint8(x, "PPOCRTextDetector")
        images = _resized(images, self.input_size(x.shape[2], x.shape[3]))
        batch = ((images.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2)
        return torch.from_numpy(_run(self.net, batch)).to(x.device)

    def forward(self, x: Tensor) -> list[dict[str, Tensor]]:
        prob = self.probability_map(x).cpu().numpy()[:, 0]
        out = []
        for p in prob:
            boxes, scores, _ = db_boxes(p, (x.shape[2], x.shape[3]), thresh=self.thresh, box_thresh=self.box_thresh,
                                        unclip_ratio=self.unclip_ratio, use_dilation=self.use_dilation,
                                        max_candidates=self.max_candidates, min_size=self.min_size)
            out.append({"boxes": torch.from_numpy(boxes).to(x.device), "scores": torch.from_numpy(scores).to(x.device),
                        "labels": torch.zeros(len(boxes), dtype=torch.int64, device=x.device)})
        return out


class PPOCROrientation(nn.Module):
    """PaddleOCR's text-line orientation classifier (0° vs 180°) as a Classification model: crops
    (B, 3, H, W) RGB in [0, 1] -> probabilities (B, 2) of :data:`ORIENTATION_LABELS` (see the
    module docstring). Class 0 = upright, 1 = upside down.

    Args:
        path: the ONNX file (default: the one in rapidocr-onnxruntime); providers: as for
            :class:`PPOCRTextDetector`.
    """

    optimization_refused = OUTSIDE_TORCH_REASON
    labels = ORIENTATION_LABELS
    threshold = ORIENTATION_THRESHOLD

    def __init__(self, *, path: str | None = None, providers: Sequence[str] | None = None) -> None:
        super().__init__()
        _cv2()
        self.net = OnnxModel(path or ppocr_model_path(ORIENTATION_FILE), providers=providers)
        self.config: dict[str, Any] = {"arch": "ppocr-orientation", **({"path": path} if path else {})}
        self.eval()

    def extra_repr(self) -> str:
        c, h, w = ORIENTATION_SHAPE
        return f"input={c}x{h}x{w}, labels={ORIENTATION_LABELS}"

    @staticmethod
    def resized_width(height: int, width: int) -> int:
        """Width of a crop of (height, width) resized to height 48 (at most 192; the rest is padding)."""
        _, h, w = ORIENTATION_SHAPE
        return min(w, int(math.ceil(h * width / height)))

    def prepare(self, x: Tensor) -> np.ndarray:
        """The classifier's input (B, 3, 48, 192) float32 for crops x (B, 3, H, W) RGB in [0, 1]."""
        images = _bgr_uint8(x, "PPOCROrientation")
        c, h, w = ORIENTATION_SHAPE
        rw = self.resized_width(x.shape[2], x.shape[3])
        out = np.zeros((len(images), c, h, w), np.float32)
        out[..., :rw] = ((_resized(images, (h, rw)).astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2)
        return out

    def forward(self, x: Tensor) -> Tensor:
        return torch.from_numpy(_run(self.net, self.prepare(x))).to(x.device)


register_model("ppocr-text-detector", PPOCRTextDetector)
register_model("ppocr-orientation", PPOCROrientation)
