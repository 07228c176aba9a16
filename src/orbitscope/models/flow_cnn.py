"""A small learned flow estimator for image pairs (an encoder–decoder with skip connections),
small enough to train on 2 CPU cores in minutes.

Convention: pairs (B, 2, C, H, W) in [0, 1], H and W multiples of 4 -> flow (B, 2, H, W), (u, v)
in pixels per frame, u along +x, v along +y (down), at input resolution. The two frames are
stacked along channels; three 3×3 convolution stages at strides 1, 2 and 4 (the last with
dilations 2 and 4: a receptive field of about 60 px), then two ×2 bilinear up-sampling stages,
each joined with the encoder's features at that scale, and a 3×3 head. It is not equivariant by
construction: trained plainly it need not commute with D4 × time reversal; trained with random
elements of the group, or symmetrised (:func:`orbitscope.models.symmetrize` with
``input_kind="frames", output_kind="flow"``), it does more (exactly, for the latter).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import DataError
from .registry import register_model

__all__ = ["FlowCNN"]


def _conv(cin: int, cout: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, dilation, dilation=dilation, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class FlowCNN(nn.Module):
    """See the module docstring. ``channels`` per frame (1 grey, 3 RGB); ``width`` features at
    full resolution (twice that below)."""

    def __init__(self, channels: int = 1, width: int = 24) -> None:
        super().__init__()
        self.config: dict[str, Any] = {"arch": "flow-cnn", "channels": int(channels), "width": int(width)}
        w = int(width)
        self.enc1 = nn.Sequential(_conv(2 * int(channels), w), _conv(w, w))
        self.enc2 = nn.Sequential(_conv(w, 2 * w, 2), _conv(2 * w, 2 * w))
        self.enc3 = nn.Sequential(_conv(2 * w, 2 * w, 2), _conv(2 * w, 2 * w, dilation=2), _conv(2 * w, 2 * w, dilation=4))
        self.dec2 = _conv(4 * w, 2 * w)
        self.dec1 = _conv(3 * w, w)
        self.head = nn.Conv2d(w, 2, 3, 1, 1)

    def forward(self, frames: Tensor) -> Tensor:
        if frames.ndim != 5 or frames.shape[1] != 2:
            raise DataError(f"FlowCNN needs image pairs (batch, 2, channels, H, W), got {tuple(frames.shape)}")
        b, _, c, h, w = frames.shape
        if h % 4 or w % 4:
            raise DataError(f"FlowCNN needs H and W multiples of 4, got {h} × {w}")
        x = frames.reshape(b, 2 * c, h, w)
        f1 = self.enc1(x)
        f2 = self.enc2(f1)
        f3 = self.enc3(f2)
        up2 = F.interpolate(f3, size=f2.shape[-2:], mode="bilinear", align_corners=False)
        d2 = self.dec2(torch.cat([up2, f2], 1))
        up1 = F.interpolate(d2, size=f1.shape[-2:], mode="bilinear", align_corners=False)
        d1 = self.dec1(torch.cat([up1, f1], 1))
        return self.head(d1)


register_model("flow-cnn", FlowCNN)
