"""A small anchor-free detector (centre heatmap + size regression, after CenterNet: Zhou, Wang &
Krähenbühl 2019, "Objects as Points"), trainable on 2 CPU cores in minutes.

Convention: images (B, C, H, W) in [0, 1], H and W multiples of the stride 4. Per output cell
(i, j) of the stride-4 map: class heatmap logits (``num_classes``), the offset of the object's
centre inside the cell (dx, dy in cells) and its log size (log w, log h in cells). Decoding keeps
cells that are the maximum of their 3 × 3 neighbourhood (per class), the ``max_detections``
highest, and returns torchvision-style ``list[dict(boxes xyxy pixels, scores, labels)]`` with
scores = sigmoid(heatmap).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .registry import register_model

__all__ = ["CentreDetector", "STRIDE"]

STRIDE = 4


def _block(cin: int, cout: int, stride: int, dilation: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, dilation, dilation=dilation, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class CentreDetector(nn.Module):
    """See the module docstring. ``width`` channels throughout (stride 1, 2, 4, then two more)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, width: int = 32, max_detections: int = 10) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"arch": "centre-detector", "num_classes": int(num_classes),
                                       "in_channels": int(in_channels), "width": int(width),
                                       "max_detections": int(max_detections)}
        self.num_classes, self.max_detections = int(num_classes), int(max_detections)
        w = int(width)
        # receptive field 73 px: 3×3 convs at strides 1, 2, 4, 4, then dilated by 2 and 4 at stride 4
        self.backbone = nn.Sequential(_block(in_channels, w, 1), _block(w, w, 2), _block(w, w, 2), _block(w, w, 1),
                                      _block(w, w, 1, dilation=2), _block(w, w, 1, dilation=4))
        self.heat = nn.Conv2d(w, num_classes, 1)
        self.offset = nn.Conv2d(w, 2, 1)
        self.size = nn.Conv2d(w, 2, 1)
        nn.init.constant_(self.heat.bias, -2.19)  # prior of 0.1 per cell (CenterNet's initialisation)

    def raw(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(heatmap logits (B, K, h, w), centre offsets (B, 2, h, w), log sizes (B, 2, h, w))."""
        f = self.backbone(x)
        return self.heat(f), self.offset(f), self.size(f)

    def forward(self, x: Tensor) -> list[dict[str, Tensor]]:
        return decode(*self.raw(x), self.max_detections)


def decode(heat: Tensor, offset: Tensor, log_size: Tensor, max_detections: int) -> list[dict[str, Tensor]]:
    """Raw head outputs -> detections (see the module docstring)."""
    b, k, h, w = heat.shape
    prob = torch.sigmoid(heat)
    peaks = prob * (F.max_pool2d(prob, 3, 1, 1) == prob)
    top = min(int(max_detections), k * h * w)
    scores, idx = peaks.reshape(b, -1).topk(top, dim=1)
    cls, cell = idx // (h * w), idx % (h * w)
    i, j = cell // w, cell % w
    out = []
    for n in range(b):
        off = offset[n].reshape(2, -1)[:, cell[n]]
        size = log_size[n].reshape(2, -1)[:, cell[n]].clamp(-4, 6).exp()
        cx, cy = (j[n] + off[0]) * STRIDE, (i[n] + off[1]) * STRIDE
        bw, bh = size[0] * STRIDE, size[1] * STRIDE
        keep = scores[n] > 0
        boxes = torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)[keep]
        out.append({"boxes": boxes, "scores": scores[n][keep], "labels": cls[n][keep]})
    return out


register_model("centre-detector", CentreDetector)
