"""MTCNN, the multi-task cascaded face detector, with its trained weights, as a Detection model.

Zhang, Zhang, Li & Qiao (2016), "Joint Face Detection and Alignment using Multi-task Cascaded
Convolutional Networks", IEEE Signal Processing Letters 23(10), and the authors' released
detection code. Three networks run in cascade:

1. **P-Net** (fully convolutional, 12 × 12 receptive field, output stride 2) slides over an image
   pyramid: scales m·f^k with m = 12 / ``min_face_size`` and f = ``scale_factor`` (0.709), as long
   as the shorter side times the scale is at least 12 px. Every output cell whose face probability
   is ≥ ``thresholds[0]`` gives a 12-px box mapped back to the image; NMS (IoU 0.5) per scale, then
   (IoU 0.7) over all scales; the box regression is applied and the box made square.
2. **R-Net** scores every candidate's square crop resized to 24 × 24; those scoring
   > ``thresholds[1]`` survive NMS (IoU 0.7), are regressed and squared again.
3. **O-Net** scores 48 × 48 crops; those scoring > ``thresholds[2]`` are regressed (and their
   five landmarks read), then "Min" NMS (intersection over the smaller box, > 0.7) keeps the final
   faces. Their score is O-Net's face probability.

Inputs to every network are normalised as (v − 127.5) · 0.0078125 with v the 0–255 pixel value.

Weights: the P-, R- and O-Net state dicts that PyPI ``facenet-pytorch`` 2.6.0 ships as package
data (``facenet_pytorch/data/{pnet,rnet,onet}.pt``; MIT licence; the authors' Caffe models as
ported by facenet-pytorch). They are found through the package's install location
(``importlib.util.find_spec``; facenet-pytorch is never imported) and loaded with
``torch.load(weights_only=True)``. Install them with ``pip install --no-deps facenet-pytorch==2.6.0``
(``make demo`` does). The networks here are this module's own; their parameter names and shapes
are those of the state dicts.

Convention: images (B, 3, H, W) RGB, float in [0, 1] (multiplied by 255 inside). Output, one dict
per image: ``boxes`` (n, 4) float32 xyxy **pixel edges** of the input (the left edge of column 0
is x = 0), not clipped to the image; ``scores`` (n,) O-Net face probability; ``labels`` (n,) int64,
all :attr:`MTCNN.label` (0 = face). :meth:`MTCNN.detect` also returns ``landmarks`` (n, 5, 2)
(x, y) in the same coordinates: left eye, right eye, nose, left and right mouth corners (as seen).

Implementation details (where released implementations differ, the choice made here):

* Internally the cascade works in the released code's 1-based inclusive pixel coordinates (a
  P-Net cell (i, j) at scale s gives the box x ∈ [⌊(2j + 1)/s⌋, ⌊(2j + 12)/s⌋], and box sizes in the
  R- and O-Net regressions count x2 − x1 + 1 pixels); the output converts them to edges:
  (x1 − 1, y1 − 1, x2, y2). So our boxes are 1 px larger at the top-left than the numbers the
  released code (and facenet-pytorch) prints for the same detection.
* Resampling (pyramid levels and the 24/48-px crops) is area averaging over the bins of
  PyTorch's adaptive average pooling (``F.interpolate(mode="area")``), as facenet-pytorch does;
  the authors' MATLAB code used bilinear resampling, the TensorFlow port OpenCV's INTER_AREA. A
  pyramid level of scale s is ⌈H·s⌉ × ⌈W·s⌉ pixels.
* A candidate's crop is the square [trunc(x1) − 1, trunc(x2)) × [trunc(y1) − 1, trunc(y2))
  (0-based, half-open). With ``border="zeros"`` (default, the authors' code) the part outside the
  image is black (0) and the square keeps its shape; with ``border="clip"`` (facenet-pytorch's) the
  crop is clipped to the image and stretched to the square input. They differ only for candidates
  that reach past the image border (faces cut by the edge of the view).
* Boxes are kept in float32 (as the networks' outputs) and are not rounded between stages.

Not shift-equivariant by construction: P-Net samples the image every 2 pixels of each pyramid
level, i.e. every 2/s px of the input (3.3 px at the first scale, 6.6 px at the third), with a
12/s-px cell, and the pyramid's scales are fixed steps of 0.709, so a face moved by a pixel can
fall on another cell, another scale, and a different regression.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import SpecError
from .registry import register_model

__all__ = ["MTCNN", "PNet", "RNet", "ONet", "mtcnn_weights_dir", "pyramid_scales", "crop_resize", "summed_area_table",
           "WEIGHTS_PACKAGE", "INSTALL_HINT"]

#: the PyPI distribution whose package data holds the trained weights
WEIGHTS_PACKAGE = "facenet-pytorch==2.6.0"
INSTALL_HINT = (f"MTCNN's trained weights come from PyPI {WEIGHTS_PACKAGE} (package data, MIT licence): "
                f"pip install --no-deps {WEIGHTS_PACKAGE}   (make demo does it)")
_FILES = ("pnet.pt", "rnet.pt", "onet.pt")


def mtcnn_weights_dir() -> Path:
    """The folder holding ``pnet.pt``, ``rnet.pt`` and ``onet.pt`` (facenet-pytorch's package data),
    found without importing facenet-pytorch.

    Raises:
        SpecError: facenet-pytorch is not installed, or its data files are missing (the message
            says how to install them).
    """
    spec = importlib.util.find_spec("facenet_pytorch")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    for place in places:
        folder = Path(place) / "data"
        if all((folder / f).is_file() for f in _FILES):
            return folder
    where = f" (found the package at {', '.join(places)} but not data/{{{','.join(_FILES)}}})" if places else ""
    raise SpecError(f"MTCNN's weights are missing{where}. {INSTALL_HINT}")


def _normalise(v: Tensor) -> Tensor:
    """0–255 pixel values -> the networks' input, (v − 127.5) · 0.0078125 (Zhang et al.), in
    channels-last memory (faster convolutions and pooling on CPUs; same values)."""
    return ((v - 127.5) * 0.0078125).contiguous(memory_format=torch.channels_last)


class PNet(nn.Module):
    """Proposal network: 3×3 conv (10) → PReLU → 2×2 max-pool → 3×3 conv (16) → PReLU → 3×3 conv (32)
    → PReLU → 1×1 heads. Fully convolutional: a 12 × 12 input gives one cell; output stride 2."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
        self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, 1)  # face / not-face logits
        self.conv4_2 = nn.Conv2d(32, 4, 1)  # box regression (dx1, dy1, dx2, dy2), in box sizes

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Normalised input (B, 3, h, w) -> (face probability (B, h', w'), regression (B, 4, h', w'))."""
        f = self.pool1(self.prelu1(self.conv1(x)))
        f = self.prelu3(self.conv3(self.prelu2(self.conv2(f))))
        return torch.softmax(self.conv4_1(f), 1)[:, 1], self.conv4_2(f)


def _flatten_transposed(f: Tensor) -> Tensor:
    """(B, C, H, W) -> (B, W·H·C): the trained dense layers read their input in this order (the
    original Caffe networks saw transposed, column-major images)."""
    return f.permute(0, 3, 2, 1).reshape(len(f), -1)


class RNet(nn.Module):
    """Refinement network on 24 × 24 crops: 3×3 conv (28), 3×3/2 max-pool, 3×3 conv (48), 3×3/2
    max-pool, 2×2 conv (64), dense 128, heads (face logits, box regression); PReLU throughout."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Normalised crops (N, 3, 24, 24) -> (face probability (N,), regression (N, 4))."""
        f = self.pool1(self.prelu1(self.conv1(x)))
        f = self.pool2(self.prelu2(self.conv2(f)))
        f = self.prelu4(self.dense4(_flatten_transposed(self.prelu3(self.conv3(f)))))
        return torch.softmax(self.dense5_1(f), 1)[:, 1], self.dense5_2(f)


class ONet(nn.Module):
    """Output network on 48 × 48 crops: 3×3 conv (32), 3×3/2 max-pool, 3×3 conv (64), 3×3/2
    max-pool, 3×3 conv (64), 2×2 max-pool, 2×2 conv (128), dense 256, heads (face logits, box
    regression, five landmarks); PReLU throughout."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)  # landmarks: 5 x then 5 y, in box sizes from the top-left

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Normalised crops (N, 3, 48, 48) -> (face probability (N,), regression (N, 4), landmarks (N, 10))."""
        f = self.pool1(self.prelu1(self.conv1(x)))
        f = self.pool2(self.prelu2(self.conv2(f)))
        f = self.pool3(self.prelu3(self.conv3(f)))
        f = self.prelu5(self.dense5(_flatten_transposed(self.prelu4(self.conv4(f)))))
        return torch.softmax(self.dense6_1(f), 1)[:, 1], self.dense6_2(f), self.dense6_3(f)


def pyramid_scales(height: int, width: int, min_face_size: float = 20.0, factor: float = 0.709) -> list[float]:
    """MTCNN's pyramid: m·f^k for k = 0, 1, … while min(height, width)·m·f^k ≥ 12, with
    m = 12 / min_face_size (P-Net's 12-px cell then covers a face of ``min_face_size`` px)."""
    m = 12.0 / float(min_face_size)
    scales, k = [], 0
    while min(height, width) * m * factor ** k >= 12:
        scales.append(m * factor ** k)
        k += 1
    return scales


def _bin_edges(start: Tensor, length: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """Adaptive-average-pooling bins of ``length`` pixels from ``start`` into ``size`` outputs
    (PyTorch's: bin i spans [⌊i·L/S⌋, ⌈(i + 1)·L/S⌉)); (N,) -> ((N, size), (N, size))."""
    i = torch.arange(size, device=start.device, dtype=torch.int64)
    lo = (i[None] * length[:, None]) // size
    hi = -((-(i[None] + 1) * length[:, None]) // size)
    return start[:, None] + lo, start[:, None] + hi


def summed_area_table(images: Tensor) -> Tensor:
    """(B, C, H, W) -> (B, (H + 1)·(W + 1), C) float64: entry y·(W + 1) + x is the sum of
    ``images[..., :y, :x]`` (what :func:`crop_resize` reads)."""
    b, c, h, w = images.shape
    sat = F.pad(images.double().cumsum(2).cumsum(3), (1, 0, 1, 0))
    return sat.permute(0, 2, 3, 1).reshape(b, (h + 1) * (w + 1), c)


def crop_resize(images: Tensor, regions: Tensor, image_index: Tensor, size: int, *, border: str = "zeros",
                chunk: int = 2048, table: Tensor | None = None) -> Tensor:
    """Area-resample rectangular regions of a batch to ``size`` × ``size``.

    Args:
        images: (B, C, H, W) float.
        regions: (N, 4) int64 ``(x0, y0, x1, y1)``, 0-based half-open pixel ranges; they may reach
            outside the image.
        image_index: (N,) int64, the image of each region.
        size: output side.
        border: ``"zeros"``: pixels outside the image are 0 (the region keeps its shape);
            ``"clip"``: the region is first clipped to the image (and so stretched).
        chunk: regions resampled at a time (bounds the memory: chunk · size² · C · 32 bytes).
        table: ``summed_area_table(images)``, when already computed.

    Returns:
        (N, C, size, size) float32: each output pixel is the mean over the bin that PyTorch's
        adaptive average pooling of the region would use (exactly ``F.interpolate(crop, size,
        mode="area")`` of the padded or clipped crop, up to rounding), computed from one
        summed-area table per image, for all regions at once. An empty region gives zeros.
    """
    if border not in ("zeros", "clip"):
        raise SpecError(f"border must be 'zeros' or 'clip', got {border!r}")
    b, c, h, w = images.shape
    n = len(regions)
    out = torch.zeros(n, c, size, size, dtype=torch.float32, device=images.device)
    if n == 0:
        return out
    flat = summed_area_table(images) if table is None else table
    r = regions.to(images.device, torch.int64)
    if border == "clip":
        r = torch.stack([r[:, 0].clamp(0, w), r[:, 1].clamp(0, h), r[:, 2].clamp(0, w), r[:, 3].clamp(0, h)], 1)
    for s in range(0, n, chunk):
        rr, bi = r[s:s + chunk], image_index[s:s + chunk].to(images.device)
        ok = (rr[:, 2] > rr[:, 0]) & (rr[:, 3] > rr[:, 1])
        y0, y1 = _bin_edges(rr[:, 1], (rr[:, 3] - rr[:, 1]).clamp(min=1), size)
        x0, x1 = _bin_edges(rr[:, 0], (rr[:, 2] - rr[:, 0]).clamp(min=1), size)
        area = ((y1 - y0)[:, :, None] * (x1 - x0)[:, None, :]).double()
        base = (bi * ((h + 1) * (w + 1)))[:, None, None]
        ys0, ys1 = base + y0.clamp(0, h)[:, :, None] * (w + 1), base + y1.clamp(0, h)[:, :, None] * (w + 1)
        xs0, xs1 = x0.clamp(0, w)[:, None, :], x1.clamp(0, w)[:, None, :]
        corners = torch.stack([ys1 + xs1, ys0 + xs1, ys1 + xs0, ys0 + xs0]).reshape(-1)
        v = flat.reshape(-1, c).index_select(0, corners).view(4, len(rr), size, size, c)
        mean = ((v[0] - v[1] - v[2] + v[3]) / area[..., None]).permute(0, 3, 1, 2).float()
        out[s:s + chunk] = mean * ok[:, None, None, None]
    return out


def _square(boxes: Tensor) -> Tensor:
    """Make boxes (n, 4) square about their centre, side max(x2 − x1, y2 − y1) (the released code's
    ``rerec``)."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    side = torch.maximum(w, h)
    x1, y1 = boxes[:, 0] + w * 0.5 - side * 0.5, boxes[:, 1] + h * 0.5 - side * 0.5
    return torch.stack([x1, y1, x1 + side, y1 + side], 1)


def _regress(boxes: Tensor, reg: Tensor, plus_one: bool) -> Tensor:
    """Apply the regression (dx1, dy1, dx2, dy2), offsets in box sizes; sizes count x2 − x1 (+ 1)."""
    w = boxes[:, 2] - boxes[:, 0] + (1 if plus_one else 0)
    h = boxes[:, 3] - boxes[:, 1] + (1 if plus_one else 0)
    return boxes + reg * torch.stack([w, h, w, h], 1)


def _crop_regions(boxes: Tensor) -> Tensor:
    """1-based inclusive float boxes -> 0-based half-open int64 regions [trunc(x1) − 1, trunc(x2))."""
    t = boxes.trunc().to(torch.int64)
    return torch.stack([t[:, 0] - 1, t[:, 1] - 1, t[:, 2], t[:, 3]], 1)


def _nms_min(boxes: Tensor, scores: Tensor, groups: Tensor, threshold: float) -> Tensor:
    """Greedy NMS by decreasing score, suppressing boxes whose intersection over the *smaller* box
    exceeds ``threshold`` (the released code's "Min" mode, with its inclusive +1 pixel sizes), within
    each group; returns kept indices in decreasing score."""
    if len(boxes) == 0:
        return torch.zeros(0, dtype=torch.int64, device=boxes.device)
    order = torch.argsort(scores, descending=True, stable=True)
    b, g = boxes[order], groups[order]
    area = (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)
    iw = (torch.minimum(b[:, None, 2], b[None, :, 2]) - torch.maximum(b[:, None, 0], b[None, :, 0]) + 1).clamp(min=0)
    ih = (torch.minimum(b[:, None, 3], b[None, :, 3]) - torch.maximum(b[:, None, 1], b[None, :, 1]) + 1).clamp(min=0)
    overlap = iw * ih / torch.minimum(area[:, None], area[None, :])
    clash = ((overlap > threshold) & (g[:, None] == g[None, :])).cpu()
    keep = torch.ones(len(b), dtype=torch.bool)
    for i in range(len(b)):
        if keep[i]:
            later = clash[i].clone()
            later[: i + 1] = False
            keep &= ~later
    return order[keep.to(order.device)]


class MTCNN(nn.Module):
    """MTCNN with its trained weights (see the module docstring).

    Args:
        min_face_size: the smallest face searched, in pixels (sets the pyramid's first scale 12 / it).
        scale_factor: the pyramid's step.
        thresholds: face-probability thresholds of P-, R- and O-Net.
        nms_thresholds: P-Net's per-scale and all-scale NMS IoU, R-Net's NMS IoU, O-Net's "Min" NMS
            overlap.
        border: how crops reaching past the image are filled: ``"zeros"`` or ``"clip"``.
        label: the class id of every detection (0 = face).
        weights: a folder with ``pnet.pt``, ``rnet.pt``, ``onet.pt`` (default: facenet-pytorch's
            package data, :func:`mtcnn_weights_dir`); ``None`` and ``pretrained=False`` leaves the
            networks randomly initialised (for tests of the plumbing only).
        pretrained: load the weights.

    Raises:
        SpecError: the weights are missing (install hint in the message), or an option is invalid.
    """

    def __init__(self, *, min_face_size: float = 20.0, scale_factor: float = 0.709,
                 thresholds: Sequence[float] = (0.6, 0.7, 0.7), nms_thresholds: Sequence[float] = (0.5, 0.7, 0.7, 0.7),
                 border: str = "zeros", label: int = 0, weights: str | os.PathLike[str] | None = None,
                 pretrained: bool = True) -> None:
        super().__init__()
        if not min_face_size > 0 or not 0 < scale_factor < 1:
            raise SpecError(f"need min_face_size > 0 and 0 < scale_factor < 1, got {min_face_size}, {scale_factor}")
        if len(thresholds) != 3 or len(nms_thresholds) != 4:
            raise SpecError(f"need 3 thresholds and 4 NMS thresholds, got {thresholds}, {nms_thresholds}")
        if border not in ("zeros", "clip"):
            raise SpecError(f"border must be 'zeros' or 'clip', got {border!r}")
        self.min_face_size, self.scale_factor = float(min_face_size), float(scale_factor)
        self.thresholds = tuple(float(t) for t in thresholds)
        self.nms_thresholds = tuple(float(t) for t in nms_thresholds)
        self.border, self.label = border, int(label)
        self.config: dict[str, Any] = {"arch": "mtcnn", "min_face_size": self.min_face_size,
                                       "scale_factor": self.scale_factor, "thresholds": list(self.thresholds),
                                       "nms_thresholds": list(self.nms_thresholds), "border": border,
                                       "label": self.label}
        self.pnet, self.rnet, self.onet = PNet(), RNet(), ONet()
        if pretrained:
            folder = Path(weights) if weights is not None else mtcnn_weights_dir()
            for net, name in zip((self.pnet, self.rnet, self.onet), _FILES):
                path = folder / name
                if not path.is_file():
                    raise SpecError(f"MTCNN's weights file {path} is missing. {INSTALL_HINT}")
                net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        self.eval()

    def extra_repr(self) -> str:  # part of the run identity, with the weights' hash
        return (f"min_face_size={self.min_face_size:g}, scale_factor={self.scale_factor:g}, "
                f"thresholds={self.thresholds}, nms_thresholds={self.nms_thresholds}, border={self.border!r}, "
                f"label={self.label}")

    def forward(self, x: Tensor) -> list[dict[str, Tensor]]:
        """Images (B, 3, H, W) RGB in [0, 1] -> per image ``{"boxes" (n, 4) xyxy pixel edges,
        "scores" (n,), "labels" (n,)}``, by decreasing score."""
        return [{k: d[k] for k in ("boxes", "scores", "labels")} for d in self.detect(x)]

    @torch.no_grad()
    def detect(self, x: Tensor) -> list[dict[str, Tensor]]:
        """As :meth:`forward`, with ``landmarks`` (n, 5, 2) (x, y) pixel coordinates too."""
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"MTCNN takes RGB images (B, 3, H, W) in [0, 1], got shape {tuple(x.shape)}")
        from torchvision.ops import batched_nms

        img = x.float() * 255.0
        bsz, _, h, w = img.shape
        dev = img.device
        t1, t2, t3 = self.thresholds
        n_scale, n_all, n_r, n_o = self.nms_thresholds

        # stage 1: P-Net over the pyramid, whole batch per scale
        found: list[Tensor] = []
        owner: list[Tensor] = []
        for s in pyramid_scales(h, w, self.min_face_size, self.scale_factor):
            level = F.interpolate(img, size=(math.ceil(h * s), math.ceil(w * s)), mode="area")
            prob, reg = self.pnet(_normalise(level))
            hit = prob >= t1
            if not hit.any():
                continue
            bi, i, j = hit.nonzero(as_tuple=True)
            cell = torch.stack([j, i], 1).float()
            boxes = torch.cat([((2 * cell + 1) / s).floor(), ((2 * cell + 12) / s).floor()], 1)
            score = prob[hit]
            rows = torch.cat([boxes, score[:, None], reg.permute(0, 2, 3, 1)[hit]], 1)
            keep = batched_nms(boxes, score, bi, n_scale)
            found.append(rows[keep])
            owner.append(bi[keep])
        if not found:
            return self._empty(bsz, dev)
        rows, bi = torch.cat(found), torch.cat(owner)
        keep = batched_nms(rows[:, :4], rows[:, 4], bi, n_all)
        rows, bi = rows[keep], bi[keep]
        boxes = _square(_regress(rows[:, :4], rows[:, 5:9], plus_one=False))

        # stage 2: R-Net on 24-px crops
        table = summed_area_table(img)
        prob, reg = self.rnet(_normalise(crop_resize(img, _crop_regions(boxes), bi, 24, border=self.border,
                                                     table=table)))
        ok = prob > t2
        boxes, score, reg, bi = boxes[ok], prob[ok], reg[ok], bi[ok]
        keep = batched_nms(boxes, score, bi, n_r)
        boxes = _square(_regress(boxes[keep], reg[keep], plus_one=True))
        bi = bi[keep]
        if len(boxes) == 0:
            return self._empty(bsz, dev)

        # stage 3: O-Net on 48-px crops
        prob, reg, marks = self.onet(_normalise(crop_resize(img, _crop_regions(boxes), bi, 48, border=self.border,
                                                            table=table)))
        ok = prob > t3
        boxes, score, reg, marks, bi = boxes[ok], prob[ok], reg[ok], marks[ok], bi[ok]
        bw, bh = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
        landmarks = torch.stack([bw[:, None] * marks[:, :5] + boxes[:, :1] - 1,
                                 bh[:, None] * marks[:, 5:] + boxes[:, 1:2] - 1], 2)
        boxes = _regress(boxes, reg, plus_one=True)
        keep = _nms_min(boxes, score, bi, n_o)
        boxes, score, landmarks, bi = boxes[keep], score[keep], landmarks[keep], bi[keep]
        edges = boxes - torch.tensor([1.0, 1.0, 0.0, 0.0], device=dev)  # 1-based inclusive -> pixel edges
        order = torch.argsort(score, descending=True, stable=True)
        order = order[torch.argsort(bi[order], stable=True)]  # by image, then by decreasing score
        counts = torch.bincount(bi, minlength=bsz).tolist()
        labels = torch.full((len(order),), self.label, dtype=torch.int64, device=dev)
        return [{"boxes": b, "scores": sc, "labels": lab, "landmarks": lm} for b, sc, lab, lm in
                zip(edges[order].split(counts), score[order].split(counts), labels.split(counts),
                    landmarks[order].split(counts))]

    def _empty(self, bsz: int, dev: torch.device) -> list[dict[str, Tensor]]:
        return [{"boxes": torch.zeros(0, 4, device=dev), "scores": torch.zeros(0, device=dev),
                 "labels": torch.zeros(0, dtype=torch.int64, device=dev),
                 "landmarks": torch.zeros(0, 5, 2, device=dev)} for _ in range(bsz)]


register_model("mtcnn", MTCNN)
